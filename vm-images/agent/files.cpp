#include "vm-images/agent/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/crypto.h"

namespace cabin::agent {
namespace {

Error errno_error(int err, const std::string& path) {
  switch (err) {
    case ENOENT:
      return make_error(Errc::kNotFound, "file_not_found", path + " does not exist");
    case EXDEV:
      return make_error(Errc::kPermissionDenied, "path_not_allowed",
                        path + " leads out of the home directory and /tmp");
    case ELOOP:
      return make_error(Errc::kPermissionDenied, "path_not_allowed",
                        path + " is a symlink, which the files API does not follow");
    case EACCES:
    case EPERM:
      return make_error(Errc::kPermissionDenied, "path_not_allowed",
                        path + ": " + std::strerror(err));
    case ENOTDIR:
      return make_error(Errc::kInvalidArgument, "not_a_directory",
                        "a part of " + path + " is not a directory");
    case EISDIR:
      return make_error(Errc::kInvalidArgument, "not_a_file", path + " is a directory");
    case ENOSPC:
    case EDQUOT:
      return make_error(Errc::kTooLarge, "disk_full", "the sandbox's disk is full");
    default:
      return make_error(Errc::kInternal, "file_error", path + ": " + std::strerror(err));
  }
}

std::pair<std::string, std::string> parent_and_leaf(const std::string& path) {
  const auto slash = path.rfind('/');
  return {slash == 0 ? std::string("/") : path.substr(0, slash), path.substr(slash + 1)};
}

}  // namespace

Result<std::pair<std::string, std::string>> FileRoots::split(const std::string& path) const {
  for (const auto& root : roots_) {
    if (root.empty()) continue;
    if (path == root) return std::pair{root, std::string(".")};
    if (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
        path[root.size()] == '/')
      return std::pair{root, path.substr(root.size() + 1)};
  }
  return make_error(Errc::kPermissionDenied, "path_not_allowed",
                    path + " is outside the home directory and /tmp");
}

Result<UniqueFd> FileRoots::open(const std::string& path, int flags) const {
  auto checked = agent_protocol::check_file_path(path);
  if (!checked) return checked.error();
  CABIN_ASSIGN_OR_RETURN(auto where, split(*checked));
  UniqueFd root(::open(where.first.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return errno_error(errno, where.first);
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  const int fd =
      static_cast<int>(::syscall(SYS_openat2, root.get(), where.second.c_str(), &how, sizeof how));
  if (fd < 0) return errno_error(errno, path);
  return UniqueFd(fd);
}

Result<FileRoots::Readable> FileRoots::open_file(const std::string& path) const {
  CABIN_ASSIGN_OR_RETURN(UniqueFd fd, open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error(errno, path);
  if (S_ISDIR(st.st_mode)) return errno_error(EISDIR, path);
  if (!S_ISREG(st.st_mode))
    return make_error(Errc::kInvalidArgument, "not_a_file", path + " is not a regular file");
  if (check_) CABIN_TRY(check_(*agent_protocol::check_file_path(path), st));
  // Reads of a regular file do not block; O_NONBLOCK only kept a FIFO from hanging the open.
  (void)::fcntl(fd.get(), F_SETFL, O_RDONLY);
  return Readable{std::move(fd), static_cast<uint64_t>(st.st_size)};
}

Result<std::vector<agent_protocol::FileEntry>> FileRoots::list(const std::string& dir) const {
  CABIN_ASSIGN_OR_RETURN(UniqueFd fd, open(dir, O_RDONLY | O_DIRECTORY));
  const int dfd = ::dup(fd.get());
  if (dfd < 0) return errno_error(errno, dir);
  DIR* d = ::fdopendir(dfd);
  if (!d) {
    ::close(dfd);
    return errno_error(errno, dir);
  }
  std::vector<agent_protocol::FileEntry> out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (out.size() >= agent_protocol::kMaxDirEntries) break;
    struct stat st {};
    if (::fstatat(fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    agent_protocol::FileEntry f;
    f.name = name;
    f.type = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : "other";
    f.size = S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
    f.mtime = st.st_mtim.tv_sec > 0 ? st.st_mtim.tv_sec : 0;
    out.push_back(std::move(f));
  }
  ::closedir(d);
  return out;
}

Result<void> FileRoots::remove(const std::string& path) const {
  auto checked = agent_protocol::check_file_path(path);
  if (!checked) return checked.error();
  const auto [parent, leaf] = parent_and_leaf(*checked);
  if (leaf.empty()) return errno_error(EISDIR, path);
  CABIN_ASSIGN_OR_RETURN(UniqueFd dir, open(parent, O_RDONLY | O_DIRECTORY));
  struct stat st {};
  if (::fstatat(dir.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno_error(errno, path);
  if (S_ISDIR(st.st_mode)) return errno_error(EISDIR, path);
  if (::unlinkat(dir.get(), leaf.c_str(), 0) != 0) return errno_error(errno, path);
  return {};
}

Result<FileRoots::Upload> FileRoots::create(const std::string& path) const {
  auto checked = agent_protocol::check_file_path(path);
  if (!checked) return checked.error();
  CABIN_ASSIGN_OR_RETURN(auto where, split(*checked));
  if (where.second == ".") return errno_error(EISDIR, path);
  const auto [parent, leaf] = parent_and_leaf(*checked);
  Upload up;
  CABIN_ASSIGN_OR_RETURN(up.dir_, open(parent, O_RDONLY | O_DIRECTORY));
  struct stat st {};
  if (::fstatat(up.dir_.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
    return errno_error(EISDIR, path);
  up.leaf_ = leaf;
  up.temp_ = ".cabin-upload-" + random_hex(8);
  up.file_ = UniqueFd(::openat(up.dir_.get(), up.temp_.c_str(),
                               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0664));
  if (!up.file_.valid()) {
    up.temp_.clear();
    return errno_error(errno, path);
  }
  return up;
}

FileRoots::Upload::~Upload() {
  if (!temp_.empty() && dir_.valid()) (void)::unlinkat(dir_.get(), temp_.c_str(), 0);
}

Result<void> FileRoots::Upload::write(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(file_.get(), bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error(errno, leaf_);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Result<void> FileRoots::Upload::commit() {
  // A symlink planted at the name is replaced, never followed: rename works on the name.
  if (::renameat(dir_.get(), temp_.c_str(), dir_.get(), leaf_.c_str()) != 0)
    return errno_error(errno, leaf_);
  temp_.clear();
  return {};
}

}  // namespace cabin::agent
