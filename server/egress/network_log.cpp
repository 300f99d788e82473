#include "server/egress/network_log.h"

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace cabin::egress {

NetworkLog::NetworkLog(std::filesystem::path file) : path_(std::move(file)) {
  if (!path_.empty()) file_.open(path_, std::ios::app);
}

NetworkLog::~NetworkLog() {
  if (file_.is_open()) write_repeats();
}

void NetworkLog::write_line(uint64_t seq, const std::string& line) {
  if (file_full_) return;
  if (file_bytes_ + line.size() > kMaxLogFileBytes) {
    // The file stops growing; the last line says so.
    file_ << nlohmann::json{{"seq", seq},
                            {"kind", "log_full"},
                            {"reason", "the log file reached its size limit"}}
                 .dump()
          << "\n";
    file_full_ = true;
  } else {
    file_ << line;
    file_bytes_ += line.size();
  }
  file_.flush();
}

void NetworkLog::write_repeats() {
  if (repeats_ == 0) return;
  write_line(last_repeat_seq_, nlohmann::json{{"seq", last_repeat_seq_},
                                              {"kind", "repeated"},
                                              {"count", repeats_},
                                              {"reason", "the refusal above, again"}}
                                       .dump() +
                                   "\n");
  repeats_ = 0;
}

void NetworkLog::append(EgressRecord r) {
  r.seq = next_seq_++;
  if (file_.is_open() && !file_full_) {
    // What makes two refusals the same: all but their numbers and times.
    std::string refusal;
    if (!r.allowed) {
      refusal = nlohmann::json{r.kind, r.method, r.host, r.port, r.rule, r.reason, r.status}.dump();
    }
    if (!refusal.empty() && refusal == last_refusal_) {
      ++repeats_;
      last_repeat_seq_ = r.seq;
    } else {
      write_repeats();
      write_line(r.seq, record_json(r).dump() + "\n");
      last_refusal_ = std::move(refusal);
    }
  }
  recent_.push_back(std::move(r));
  if (recent_.size() > kLogRecordsInMemory) recent_.pop_front();
}

std::vector<EgressRecord> NetworkLog::since(uint64_t since, size_t limit) const {
  std::vector<EgressRecord> out;
  for (const auto& r : recent_) {
    if (r.seq <= since) continue;
    if (out.size() == limit) break;
    out.push_back(r);
  }
  return out;
}

std::optional<std::vector<std::string>> NetworkLog::read_file(const std::filesystem::path& file,
                                                              uint64_t since, size_t limit) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::vector<std::string> out;
  std::string line;
  while (out.size() < limit && std::getline(in, line)) {
    auto j = parse_bounded(line, {64 * 1024, 4, 256});
    if (!j || !j->is_object() || !j->contains("seq") || !(*j)["seq"].is_number_unsigned()) continue;
    if ((*j)["seq"].get<uint64_t>() > since) out.push_back(std::move(line));
  }
  return out;
}

}  // namespace cabin::egress
