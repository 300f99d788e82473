// Fuzz target: opening a sealed stream (a hibernated VM's file, read back from the state dir). Any
// bytes either open as what a seal of them gave, or fail cleanly; a sealed copy of the input opens
// back to the input.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/sealed_stream.h"
#include "common/unique_fd.h"

namespace {

cabin::UniqueFd memfile(std::string_view bytes) {
  cabin::UniqueFd fd(::memfd_create("fuzz", MFD_CLOEXEC));
  if (!fd.valid()) __builtin_trap();
  if (::write(fd.get(), bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
    __builtin_trap();
  ::lseek(fd.get(), 0, SEEK_SET);
  return fd;
}

std::string contents(int fd) {
  std::string out(static_cast<size_t>(::lseek(fd, 0, SEEK_END)), '\0');
  if (::pread(fd, out.data(), out.size(), 0) != static_cast<ssize_t>(out.size())) __builtin_trap();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string key(32, 'k');
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  {
    auto from = memfile(in);
    auto to = memfile({});
    (void)cabin::open_stream(from.get(), to.get(), key, "ses_fuzz");
  }
  auto plain = memfile(in);
  auto sealed = memfile({});
  if (!cabin::seal_stream(plain.get(), sealed.get(), key, "ses_fuzz")) __builtin_trap();
  ::lseek(sealed.get(), 0, SEEK_SET);
  auto back = memfile({});
  if (!cabin::open_stream(sealed.get(), back.get(), key, "ses_fuzz")) __builtin_trap();
  if (contents(back.get()) != in) __builtin_trap();
  return 0;
}
