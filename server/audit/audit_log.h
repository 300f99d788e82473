// AuditLog: what was done to which session, by whom, and how it went, one JSON object per line
// in <state-dir>/audit.log. The file is rotated by size (audit.log.1, .2, ...), so it never
// fills the disk; an entry is written whole or not at all.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

namespace cabin::audit {

class AuditLog {
 public:
  explicit AuditLog(std::filesystem::path file, uint64_t max_bytes = 16ull << 20, int keep = 4);
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Appends `entry` with "time" (RFC 3339, milliseconds, UTC) added; from any thread.
  void record(nlohmann::json entry);
  const std::filesystem::path& file() const { return file_; }

 private:
  void rotate();
  // Opens the file, private to its owner.
  void open(std::ios::openmode mode);

  std::mutex mutex_;
  std::filesystem::path file_;
  uint64_t max_bytes_;
  int keep_;
  std::ofstream out_;
  uint64_t size_ = 0;
};

}  // namespace cabin::audit
