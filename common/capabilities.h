// The calling thread's capability sets (effective, permitted, inheritable, bounding, ambient):
// raw capget/capset and prctl, no libcap, for the sandbox's PID 1 and the agent.
#pragma once

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/result.h"

namespace cabin::caps {

constexpr uint64_t bit(int cap) { return uint64_t{1} << cap; }

struct Sets {
  uint64_t effective = 0;
  uint64_t permitted = 0;
  uint64_t inheritable = 0;
  bool operator==(const Sets&) const = default;
};

inline Error caps_error(const std::string& what) {
  return make_error(Errc::kInternal, "capabilities", what + ": " + std::strerror(errno));
}

inline Result<Sets> get() {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2]{};
  if (::syscall(SYS_capget, &h, d) != 0) return caps_error("capget");
  auto join = [](uint32_t lo, uint32_t hi) { return uint64_t{lo} | (uint64_t{hi} << 32); };
  return Sets{join(d[0].effective, d[1].effective), join(d[0].permitted, d[1].permitted),
              join(d[0].inheritable, d[1].inheritable)};
}

// Lowering the inheritable set also takes those capabilities out of the ambient set.
inline Result<void> set(const Sets& s) {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2]{};
  for (int i = 0; i < 2; ++i) {
    d[i].effective = static_cast<uint32_t>(s.effective >> (32 * i));
    d[i].permitted = static_cast<uint32_t>(s.permitted >> (32 * i));
    d[i].inheritable = static_cast<uint32_t>(s.inheritable >> (32 * i));
  }
  if (::syscall(SYS_capset, &h, d) != 0) return caps_error("capset");
  return {};
}

// Every capability but `keep` leaves the bounding set (needs CAP_SETPCAP); EINVAL past the last
// capability the kernel knows ends the walk.
inline Result<void> limit_bounding_set(uint64_t keep) {
  for (int c = 0; c < 64; ++c) {
    if (keep & bit(c)) continue;
    if (::prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;
      return caps_error("PR_CAPBSET_DROP " + std::to_string(c));
    }
  }
  return {};
}

// Ambient capabilities survive execve of a file without capabilities; each must be permitted and
// inheritable already.
inline Result<void> raise_ambient(uint64_t caps) {
  for (int c = 0; c < 64; ++c) {
    if (!(caps & bit(c))) continue;
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0) != 0)
      return caps_error("PR_CAP_AMBIENT_RAISE " + std::to_string(c));
  }
  return {};
}

inline Result<void> clear_ambient() {
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    return caps_error("PR_CAP_AMBIENT_CLEAR_ALL");
  return {};
}

inline bool ambient_empty() {
  for (int c = 0; c < 64; ++c) {
    int r = ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0);
    if (r < 0) break;  // past the last capability
    if (r == 1) return false;
  }
  return true;
}

}  // namespace cabin::caps
