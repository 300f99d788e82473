// NetworkLog: one session's egress decisions, numbered, newest last. Kept in memory (bounded)
// while the session lives and appended to a JSON-lines file that outlives it.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "server/egress/proxy.h"

namespace cabin::egress {

inline constexpr size_t kLogRecordsInMemory = 10000;
inline constexpr uint64_t kMaxLogFileBytes = 16u << 20;
inline constexpr size_t kMaxLogAnswer = 1000;  // records in one answer

class NetworkLog {
 public:
  // `file`: where records are appended (empty: memory only).
  explicit NetworkLog(std::filesystem::path file);
  ~NetworkLog();
  NetworkLog(const NetworkLog&) = delete;
  NetworkLog& operator=(const NetworkLog&) = delete;
  // Into the file, a refusal just like the one written before it is counted rather than
  // written: a line of kind "repeated" with the count follows once another record comes (or the
  // log ends). Memory keeps every record.
  void append(EgressRecord r);
  // Records with seq > since, oldest first, at most `limit`.
  std::vector<EgressRecord> since(uint64_t since, size_t limit = kMaxLogAnswer) const;
  uint64_t last_seq() const { return next_seq_ - 1; }

  // An ended session's records, from its file: JSON lines with seq > since, at most `limit`.
  static std::optional<std::vector<std::string>> read_file(const std::filesystem::path& file,
                                                           uint64_t since,
                                                           size_t limit = kMaxLogAnswer);

 private:
  std::filesystem::path path_;
  std::ofstream file_;
  uint64_t file_bytes_ = 0;
  bool file_full_ = false;
  // The last line written to the file, when it was a refusal, and its repeats since.
  std::string last_refusal_;
  uint64_t repeats_ = 0;
  uint64_t last_repeat_seq_ = 0;
  void write_line(uint64_t seq, const std::string& line);
  void write_repeats();
  std::deque<EgressRecord> recent_;
  uint64_t next_seq_ = 1;
};

}  // namespace cabin::egress
