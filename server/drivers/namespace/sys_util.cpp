#include "server/drivers/namespace/sys_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "common/unique_fd.h"

namespace cabin::nsbox {

Error sys_error(std::string_view step, int err) {
  return make_error(Errc::kInternal, "sandbox_system",
                    std::string(step) + ": " + std::strerror(err));
}

Result<void> write_file(const std::string& path, std::string_view data) {
  UniqueFd fd(retry_eintr([&] { return ::open(path.c_str(), O_WRONLY | O_CLOEXEC); }));
  if (!fd.valid()) return sys_error("open " + path);
  // procfs and cgroupfs files take the whole value in one write; a short write is an error.
  ssize_t n = retry_eintr([&] { return ::write(fd.get(), data.data(), data.size()); });
  if (n < 0) return sys_error("write " + path);
  if (static_cast<size_t>(n) != data.size()) return sys_error("short write " + path, EIO);
  return {};
}

std::optional<std::string> read_file(const std::string& path, size_t max_bytes) {
  UniqueFd fd(retry_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); }));
  if (!fd.valid()) return std::nullopt;
  std::string out;
  char buf[4096];
  while (out.size() < max_bytes) {
    ssize_t n = retry_eintr([&] { return ::read(fd.get(), buf, sizeof buf); });
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  if (out.size() > max_bytes) out.resize(max_bytes);
  return out;
}

bool valid_sandbox_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

int mirror_wait_status(int wait_status, int otherwise) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (!WIFSIGNALED(wait_status)) return otherwise;
  const int sig = WTERMSIG(wait_status);
  const struct rlimit no_core {
    0, 0
  };
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  return 128 + sig;  // a signal whose default is not to terminate
}

}  // namespace cabin::nsbox
