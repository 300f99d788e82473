#include "server/drivers/namespace/sys_util.h"

#include <fcntl.h>
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

}  // namespace cabin::nsbox
