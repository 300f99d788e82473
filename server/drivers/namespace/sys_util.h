// Small POSIX helpers shared by cabin-sandbox and the namespace driver: EINTR retry, file I/O,
// errors.
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin::nsbox {

// Repeats a syscall wrapper while it fails with EINTR.
template <typename F>
auto retry_eintr(F f) {
  decltype(f()) r;
  do {
    r = f();
  } while (r == -1 && errno == EINTR);
  return r;
}

// "step: strerror(err)" as an internal error.
Error sys_error(std::string_view step, int err = errno);

// Writes all of `data` to an existing file (procfs, cgroupfs): open(O_WRONLY), one write, close.
Result<void> write_file(const std::string& path, std::string_view data);
// Reads at most `max_bytes` of a file; nullopt when it cannot be opened or read.
std::optional<std::string> read_file(const std::string& path, size_t max_bytes = 1 << 20);

// True for a session id that is safe as one path component: [a-z0-9_], 1..64 characters.
bool valid_sandbox_id(std::string_view id);

// For a parent that ends as its child did: the child's exit code, or death by the same signal
// (raised on itself, without a core dump: the child's crash is not the parent's).
// `otherwise` when `wait_status` is neither.
int mirror_wait_status(int wait_status, int otherwise);

}  // namespace cabin::nsbox
