// The sandbox's seccomp filter: a denylist as data (one reason per entry) and its installation.
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.h"

namespace cabin::nsbox {

struct SyscallRule {
  const char* name;    // resolved by libseccomp for the native architecture
  int err;             // errno the call fails with
  int arg_index = -1;  // >= 0: only when this argument equals arg_value (ioctl, socket)
  uint64_t arg_value = 0;
  const char* why = "";
};

// Everything not listed is allowed: Chromium's own sandbox needs clone/unshare with new user, pid
// and net namespaces, chroot and seccomp, and layers its own stricter filter on top.
const std::vector<SyscallRule>& seccomp_denylist();

// Sets no_new_privs and loads the filter for this process and all its descendants. Other
// architectures (i386, x32) are killed by libseccomp's default bad-arch action.
Result<void> install_seccomp(const std::vector<SyscallRule>& rules);

}  // namespace cabin::nsbox
