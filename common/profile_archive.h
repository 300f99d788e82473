// A browser profile as one blob: the tree Chromium leaves in its user data directory, packed so
// that cabind can keep it sealed at rest (common/crypto's seal) between the sessions that use it.
// The tree is written by a sandbox, so it is hostile: packing never follows a link, takes only
// directories and regular files, and stops at the limits; unpacking checks every path and size
// before it writes, and writes only below the directory it is given.
//
// Format: "CABINPF1", then entries until an end entry:
//   u8 type (0 end, 1 directory, 2 file), u16 BE path length, the path (relative, '/'-separated),
//   and for a file u64 BE size then its bytes. A directory comes before what it holds.
// On a microVM's profile disk an archive is preceded by its length (u64 BE); length 0: none.
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace cabin::profiles {

// What Chromium rebuilds on its own and a saved profile leaves out: caches of the network, of
// compiled code and shaders, and crash reports.
inline const std::set<std::string> kChromiumCacheDirs = {
    "Cache",     "Code Cache",        "GPUCache",        "ShaderCache", "GrShaderCache",
    "DawnCache", "DawnGraphiteCache", "DawnWebGPUCache", "Crashpad",    "component_crx_cache"};

struct ArchiveLimits {
  uint64_t max_bytes = 256ull << 20;  // the files' bytes together
  size_t max_entries = 100000;
  size_t max_path = 1024;
  size_t max_depth = 32;  // directories deep
};

struct Entry {
  bool directory = false;
  std::string path;
  std::string_view data;  // a file's bytes, in the archive it was read from
};

// Packs the tree below `dir`, leaving out directories named in `skip_dirs` (at any depth).
// kTooLarge over a limit.
Result<std::string> pack(const std::filesystem::path& dir, const ArchiveLimits& limits = {},
                         const std::set<std::string>& skip_dirs = {});
// Reads an archive, checking every entry: its path (relative, no "." or ".." or empty part, no
// NUL), its parent listed before it, the limits. Entries point into `archive`.
Result<std::vector<Entry>> parse(std::string_view archive, const ArchiveLimits& limits = {});
// pack() of the directory open at `dirfd` (which stays the caller's).
Result<std::string> pack_at(int dirfd, const ArchiveLimits& limits = {},
                            const std::set<std::string>& skip_dirs = {});
// parse(), then writes the tree into `dir` (which exists): directories 0700, files 0600, none
// replacing anything.
Result<void> unpack(std::string_view archive, const std::filesystem::path& dir,
                    const ArchiveLimits& limits = {});

// The most a profile disk holds: an archive within ArchiveLimits' bytes, with room for its
// entries' headers.
inline constexpr uint64_t kMaxDiskArchiveBytes = 320ull << 20;
inline constexpr uint64_t kDiskBytes = 8 + kMaxDiskArchiveBytes;

// The archive on the disk (a file or a block device) open at `fd`: empty when there is none.
// kTooLarge when its length says more than `max_bytes` or than the disk holds.
Result<std::string> read_disk(int fd, uint64_t max_bytes);
// Writes `archive` with its length at the start of the disk open at `fd` and flushes it;
// kTooLarge when it does not fit in the disk.
Result<void> write_disk(int fd, std::string_view archive);

}  // namespace cabin::profiles
