#include "server/sessions/state_disk.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <map>
#include <vector>

#include "server/api/ids.h"

namespace cabin::sessions {
namespace fs = std::filesystem;

Result<void> check_state_disk(const fs::path& dir, uint64_t min_free_bytes) {
  if (min_free_bytes == 0) return {};
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return {};  // unknown: not a reason to refuse
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (free_bytes >= min_free_bytes) return {};
  return make_error(Errc::kUnavailable, "state_disk_full",
                    "the state dir's file system has " + std::to_string(free_bytes >> 20) +
                        " MiB free, less than --state-min-free-mb (" +
                        std::to_string(min_free_bytes >> 20) +
                        "): free space there (old recordings, profiles) or lower the flag");
}

namespace {

// One ended session's files: their paths, bytes and newest mtime.
struct Lot {
  std::vector<fs::path> paths;
  uint64_t bytes = 0;
  std::time_t newest = 0;
};

std::time_t mtime_of(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? st.st_mtim.tv_sec : 0;
}

// A file's bytes, or a dir's files' bytes below it; and the newest mtime among them.
void measure(const fs::path& p, Lot& lot) {
  std::error_code ec;
  lot.paths.push_back(p);
  if (fs::is_directory(fs::symlink_status(p, ec))) {
    for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      lot.bytes += it->file_size(ec);
      lot.newest = std::max(lot.newest, mtime_of(it->path()));
    }
    lot.newest = std::max(lot.newest, mtime_of(p));
  } else if (fs::is_regular_file(fs::symlink_status(p, ec))) {
    lot.bytes += fs::file_size(p, ec);
    lot.newest = std::max(lot.newest, mtime_of(p));
  }
}

}  // namespace

Pruned prune_state(const fs::path& logs_dir, const fs::path& recordings_dir,
                   const std::function<bool(const std::string&)>& live, std::time_t now,
                   const Retention& r) {
  std::map<std::string, Lot> lots;
  std::error_code ec;
  if (!logs_dir.empty()) {
    for (const auto& e : fs::directory_iterator(logs_dir, ec)) {
      std::string name = e.path().filename().string();
      std::string id;
      for (std::string_view suffix : {".network.jsonl", ".log"}) {
        if (name.size() > suffix.size() && name.ends_with(suffix)) {
          id = name.substr(0, name.size() - suffix.size());
          break;
        }
      }
      if (api::valid_session_id(id) && !live(id)) measure(e.path(), lots[id]);
    }
  }
  if (!recordings_dir.empty()) {
    for (const auto& e : fs::directory_iterator(recordings_dir, ec)) {
      const std::string id = e.path().filename().string();
      if (api::valid_session_id(id) && !live(id)) measure(e.path(), lots[id]);
    }
  }
  std::vector<std::pair<std::string, Lot*>> order;
  uint64_t total = 0;
  for (auto& [id, lot] : lots) {
    order.emplace_back(id, &lot);
    total += lot.bytes;
  }
  // Oldest first.
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second->newest < b.second->newest; });
  Pruned out;
  for (const auto& [id, lot] : order) {
    const bool too_old = r.max_age.count() > 0 && lot->newest + r.max_age.count() < now;
    const bool too_many = r.max_bytes > 0 && total > r.max_bytes;
    if (!too_old && !too_many) continue;
    for (const auto& p : lot->paths) fs::remove_all(p, ec);
    total -= lot->bytes;
    out.bytes += lot->bytes;
    ++out.sessions;
  }
  return out;
}

}  // namespace cabin::sessions
