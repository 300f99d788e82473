// The state dir's disk: creates are refused while its file system is nearly full, and what ended
// sessions left there (their logs and recordings) is pruned by age and by total size.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <functional>
#include <string>

#include "common/result.h"

namespace cabin::sessions {

// 503 state_disk_full while the file system of `dir` has less than `min_free_bytes` free for
// cabind (statvfs's f_bavail); 0: never refused.
Result<void> check_state_disk(const std::filesystem::path& dir, uint64_t min_free_bytes);

struct Retention {
  std::chrono::seconds max_age{0};  // an ended session's logs and recordings; 0: any age
  uint64_t max_bytes = 0;           // all ended sessions' together; 0: any size
};

struct Pruned {
  size_t sessions = 0;
  uint64_t bytes = 0;
};

// Removes what ended sessions (ids for which `live` is false) left: logs_dir/<id>.log and
// <id>.network.jsonl, recordings_dir/<id>/. A session's lot goes when its newest file is older
// than max_age; then the oldest lots go until the rest fit in max_bytes. Only names of session
// ids are touched.
Pruned prune_state(const std::filesystem::path& logs_dir,
                   const std::filesystem::path& recordings_dir,
                   const std::function<bool(const std::string&)>& live, std::time_t now,
                   const Retention& r);

}  // namespace cabin::sessions
