#include "server/audit/audit_log.h"

#include <chrono>

#include "common/clock.h"

namespace cabin::audit {

AuditLog::AuditLog(std::filesystem::path file, uint64_t max_bytes, int keep)
    : file_(std::move(file)), max_bytes_(max_bytes), keep_(keep) {
  std::error_code ec;
  size_ = std::filesystem::exists(file_, ec) ? std::filesystem::file_size(file_, ec) : 0;
  if (ec) size_ = 0;
  open(std::ios::app);
}

void AuditLog::open(std::ios::openmode mode) {
  out_.open(file_, mode);
  // Who did what is the operator's to read. Not by umask: that is the whole process's.
  std::error_code ec;
  std::filesystem::permissions(
      file_, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write, ec);
}

void AuditLog::rotate() {
  out_.close();
  std::error_code ec;
  for (int i = keep_ - 1; i >= 1; --i) {
    const auto from = file_.string() + "." + std::to_string(i);
    std::filesystem::rename(from, file_.string() + "." + std::to_string(i + 1), ec);
  }
  // The oldest kept file is replaced by the one before it: nothing beyond `keep_` remains.
  std::filesystem::rename(file_, file_.string() + ".1", ec);
  open(std::ios::trunc);
  size_ = 0;
}

void AuditLog::record(nlohmann::json entry) {
  nlohmann::json line = {{"time", format_rfc3339_ms(std::chrono::system_clock::now())}};
  for (auto& [k, v] : entry.items()) line[k] = std::move(v);
  // Invalid UTF-8 (an argv's bytes) is replaced, never a reason to lose the entry.
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard lock(mutex_);
  if (size_ > 0 && size_ + text.size() > max_bytes_) rotate();
  out_ << text;
  out_.flush();
  size_ += text.size();
}

}  // namespace cabin::audit
