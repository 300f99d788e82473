#include "common/profile_archive.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <set>

#include "common/unique_fd.h"

namespace cabin::profiles {
namespace {

constexpr std::string_view kMagic = "CABINPF1";
constexpr uint8_t kEnd = 0, kDir = 1, kFile = 2;

Error too_large(const std::string& what) {
  return make_error(Errc::kTooLarge, "profile_too_large", "the profile " + what);
}

Error io_error(const std::string& what) {
  return make_error(Errc::kInternal, "profile_io", what + ": " + std::strerror(errno));
}

Error bad(const std::string& what) {
  return make_error(Errc::kInternal, "profile_corrupt", "the profile's archive: " + what);
}

void put_u16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xff));
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

struct Packer {
  const ArchiveLimits& limits;
  const std::set<std::string>& skip_dirs;
  std::string out;
  uint64_t bytes = 0;
  size_t entries = 0;

  Result<void> entry(uint8_t type, const std::string& path) {
    if (++entries > limits.max_entries) return too_large("has more than " + std::to_string(limits.max_entries) + " entries");
    if (path.size() > limits.max_path) return too_large("has a path longer than " + std::to_string(limits.max_path) + " bytes");
    out.push_back(static_cast<char>(type));
    put_u16(out, static_cast<uint16_t>(path.size()));
    out.append(path);
    return {};
  }

  // The directory open as `dirfd`, known in the archive as `prefix` ("" for the top).
  Result<void> walk(int dirfd, const std::string& prefix, size_t depth) {
    if (depth > limits.max_depth) return too_large("is nested deeper than " + std::to_string(limits.max_depth));
    // fdopendir takes the descriptor over; the dup keeps `dirfd` for openat.
    const int listing = ::dup(dirfd);
    if (listing < 0) return io_error("dup");
    DIR* d = ::fdopendir(listing);
    if (!d) {
      ::close(listing);
      return io_error("fdopendir");
    }
    std::set<std::string> names;  // sorted: the same tree packs the same way
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.insert(name);
    }
    ::closedir(d);
    for (const auto& name : names) {
      struct stat st {};
      if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone
      const std::string path = prefix.empty() ? name : prefix + "/" + name;
      if (S_ISDIR(st.st_mode)) {
        if (skip_dirs.count(name)) continue;
        UniqueFd sub(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub.valid()) continue;  // replaced meanwhile: left out
        CABIN_TRY(entry(kDir, path));
        CABIN_TRY(walk(sub.get(), path, depth + 1));
      } else if (S_ISREG(st.st_mode)) {
        // Non-blocking and checked again once open: a file swapped for a FIFO never blocks.
        UniqueFd f(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
        if (!f.valid()) continue;
        struct stat fst {};
        if (::fstat(f.get(), &fst) != 0 || !S_ISREG(fst.st_mode)) continue;
        // A file that cannot fit is refused before a byte of it is read.
        if (static_cast<uint64_t>(fst.st_size) > limits.max_bytes - bytes) {
          return too_large("holds more than " + std::to_string(limits.max_bytes >> 20) + " MiB");
        }
        CABIN_TRY(entry(kFile, path));
        const size_t size_at = out.size();
        put_u64(out, 0);
        uint64_t n = 0;
        char buf[64 * 1024];
        for (;;) {
          const ssize_t r = ::read(f.get(), buf, sizeof buf);
          if (r < 0 && errno == EINTR) continue;
          if (r < 0) return io_error("read " + path);
          if (r == 0) break;
          n += static_cast<uint64_t>(r);
          if (bytes + n > limits.max_bytes) {
            return too_large("holds more than " + std::to_string(limits.max_bytes >> 20) + " MiB");
          }
          out.append(buf, static_cast<size_t>(r));
        }
        bytes += n;
        for (int i = 0; i < 8; ++i)
          out[size_at + i] = static_cast<char>((n >> (8 * (7 - i))) & 0xff);
      }
      // Links, sockets, FIFOs and devices stay behind.
    }
    return {};
  }
};

bool valid_path(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  for (;;) {
    const size_t slash = p.find('/', start);
    const std::string_view part = p.substr(start, slash == std::string_view::npos ? p.npos : slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

std::string parent_of(std::string_view p) {
  const size_t slash = p.rfind('/');
  return slash == std::string_view::npos ? "" : std::string(p.substr(0, slash));
}

}  // namespace

Result<std::string> pack(const std::filesystem::path& dir, const ArchiveLimits& limits,
                         const std::set<std::string>& skip_dirs) {
  UniqueFd top(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!top.valid()) return io_error("open " + dir.string());
  return pack_at(top.get(), limits, skip_dirs);
}

Result<std::string> pack_at(int dirfd, const ArchiveLimits& limits,
                            const std::set<std::string>& skip_dirs) {
  Packer p{limits, skip_dirs};
  p.out.append(kMagic);
  CABIN_TRY(p.walk(dirfd, "", 0));
  p.out.push_back(static_cast<char>(kEnd));
  return std::move(p.out);
}

Result<std::vector<Entry>> parse(std::string_view a, const ArchiveLimits& limits) {
  if (a.substr(0, kMagic.size()) != kMagic) return bad("no magic");
  size_t at = kMagic.size();
  std::vector<Entry> out;
  std::set<std::string, std::less<>> dirs = {""};
  std::set<std::string, std::less<>> seen;
  uint64_t bytes = 0;
  for (;;) {
    if (at >= a.size()) return bad("ends without an end entry");
    const uint8_t type = static_cast<uint8_t>(a[at++]);
    if (type == kEnd) break;
    if (type != kDir && type != kFile) return bad("an entry of unknown type");
    if (a.size() - at < 2) return bad("a cut entry");
    const size_t len = (static_cast<uint8_t>(a[at]) << 8) | static_cast<uint8_t>(a[at + 1]);
    at += 2;
    if (len > limits.max_path) return too_large("has a path longer than " + std::to_string(limits.max_path) + " bytes");
    if (a.size() - at < len) return bad("a cut path");
    Entry e;
    e.directory = type == kDir;
    e.path = std::string(a.substr(at, len));
    at += len;
    if (!valid_path(e.path)) return bad("an invalid path");
    if (!dirs.count(parent_of(e.path))) return bad("an entry before its directory");
    if (!seen.insert(e.path).second) return bad("an entry twice");
    if (static_cast<size_t>(std::count(e.path.begin(), e.path.end(), '/')) > limits.max_depth)
      return too_large("is nested deeper than " + std::to_string(limits.max_depth));
    if (out.size() >= limits.max_entries) return too_large("has more than " + std::to_string(limits.max_entries) + " entries");
    if (e.directory) {
      dirs.insert(e.path);
    } else {
      if (a.size() - at < 8) return bad("a cut size");
      uint64_t n = 0;
      for (int i = 0; i < 8; ++i) n = (n << 8) | static_cast<uint8_t>(a[at + i]);
      at += 8;
      if (n > limits.max_bytes - bytes) return too_large("holds more than " + std::to_string(limits.max_bytes >> 20) + " MiB");
      if (a.size() - at < n) return bad("a cut file");
      bytes += n;
      e.data = a.substr(at, static_cast<size_t>(n));
      at += static_cast<size_t>(n);
    }
    out.push_back(std::move(e));
  }
  if (at != a.size()) return bad("bytes after the end");
  return out;
}

Result<void> unpack(std::string_view archive, const std::filesystem::path& dir,
                    const ArchiveLimits& limits) {
  CABIN_ASSIGN_OR_RETURN(auto entries, parse(archive, limits));
  UniqueFd top(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!top.valid()) return io_error("open " + dir.string());
  for (const auto& e : entries) {
    // Paths were checked: relative, no "..", their directories made first by this loop, and
    // nothing followed on the way (O_NOFOLLOW below, and only directories made here exist).
    if (e.directory) {
      if (::mkdirat(top.get(), e.path.c_str(), 0700) != 0) return io_error("mkdir " + e.path);
      continue;
    }
    UniqueFd f(::openat(top.get(), e.path.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!f.valid()) return io_error("create " + e.path);
    size_t done = 0;
    while (done < e.data.size()) {
      const ssize_t w = ::write(f.get(), e.data.data() + done, e.data.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return io_error("write " + e.path);
      done += static_cast<size_t>(w);
    }
  }
  return {};
}

namespace {

// The disk's size: a regular file's, or a block device's.
Result<uint64_t> disk_size(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("stat the profile disk");
  if (S_ISREG(st.st_mode)) return static_cast<uint64_t>(st.st_size);
  if (!S_ISBLK(st.st_mode)) return bad("the profile disk is neither a file nor a block device");
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) return io_error("size the profile disk");
  return static_cast<uint64_t>(end);
}

Result<void> pread_all(int fd, char* p, size_t n, uint64_t at) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_error("read the profile disk");
    if (r == 0) return bad("the profile disk ends early");
    p += r;
    n -= static_cast<size_t>(r);
    at += static_cast<uint64_t>(r);
  }
  return {};
}

Result<void> pwrite_all(int fd, const char* p, size_t n, uint64_t at) {
  while (n > 0) {
    const ssize_t r = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_error("write the profile disk");
    p += r;
    n -= static_cast<size_t>(r);
    at += static_cast<uint64_t>(r);
  }
  return {};
}

}  // namespace

Result<std::string> read_disk(int fd, uint64_t max_bytes) {
  CABIN_ASSIGN_OR_RETURN(const uint64_t size, disk_size(fd));
  if (size < 8) return std::string();  // a disk for no profile
  char head[8];
  CABIN_TRY(pread_all(fd, head, sizeof head, 0));
  uint64_t len = 0;
  for (unsigned char c : head) len = (len << 8) | c;
  if (len > max_bytes || len > size - 8) return too_large("on the disk says it is too large");
  std::string out(len, '\0');
  CABIN_TRY(pread_all(fd, out.data(), out.size(), 8));
  return out;
}

Result<void> write_disk(int fd, std::string_view archive) {
  CABIN_ASSIGN_OR_RETURN(const uint64_t size, disk_size(fd));
  if (size < 8 || archive.size() > size - 8) return too_large("does not fit in its disk");
  std::string head;
  put_u64(head, archive.size());
  // No length while the archive is written, then its length: a write cut short leaves none.
  CABIN_TRY(pwrite_all(fd, "\0\0\0\0\0\0\0\0", 8, 0));
  CABIN_TRY(pwrite_all(fd, archive.data(), archive.size(), 8));
  CABIN_TRY(pwrite_all(fd, head.data(), head.size(), 0));
  if (::fsync(fd) != 0) return io_error("flush the profile disk");
  return {};
}

}  // namespace cabin::profiles
