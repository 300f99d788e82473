#include "vm-images/agent/profile_disk.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "common/profile_archive.h"
#include "common/unique_fd.h"

namespace cabin::agent {
namespace {

Result<UniqueFd> open_disk(const std::string& disk, int flags) {
  UniqueFd fd(::open(disk.c_str(), flags | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    return make_error(Errc::kInternal, "profile_io",
                      "open the profile disk " + disk + ": " + std::strerror(errno));
  }
  return fd;
}

}  // namespace

Result<void> load_profile_disk(const std::string& disk, const std::filesystem::path& dir) {
  CABIN_ASSIGN_OR_RETURN(const UniqueFd fd, open_disk(disk, O_RDONLY));
  CABIN_ASSIGN_OR_RETURN(const std::string archive,
                         profiles::read_disk(fd.get(), profiles::kMaxDiskArchiveBytes));
  if (archive.empty()) return {};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return make_error(Errc::kInternal, "profile_io",
                      "make " + dir.string() + ": " + ec.message());
  }
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  return profiles::unpack(archive, dir);
}

Result<uint64_t> save_profile_disk(const std::string& disk, const std::filesystem::path& dir) {
  CABIN_ASSIGN_OR_RETURN(const std::string archive,
                         profiles::pack(dir, {}, profiles::kChromiumCacheDirs));
  CABIN_ASSIGN_OR_RETURN(const UniqueFd fd, open_disk(disk, O_WRONLY));
  CABIN_TRY(profiles::write_disk(fd.get(), archive));
  return static_cast<uint64_t>(archive.size());
}

}  // namespace cabin::agent
