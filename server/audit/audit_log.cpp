#include "server/audit/audit_log.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <ctime>

namespace cabin::audit {

std::string rfc3339_ms_now() {
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[96];  // room for any int, as -Wformat-truncation counts
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

AuditLog::AuditLog(std::filesystem::path file, uint64_t max_bytes, int keep)
    : file_(std::move(file)), max_bytes_(max_bytes), keep_(keep) {
  std::error_code ec;
  size_ = std::filesystem::exists(file_, ec) ? std::filesystem::file_size(file_, ec) : 0;
  if (ec) size_ = 0;
  const mode_t old = ::umask(077);  // who did what is the operator's to read
  out_.open(file_, std::ios::app);
  ::umask(old);
}

void AuditLog::rotate() {
  out_.close();
  std::error_code ec;
  for (int i = keep_ - 1; i >= 1; --i) {
    const auto from = file_.string() + "." + std::to_string(i);
    std::filesystem::rename(from, file_.string() + "." + std::to_string(i + 1), ec);
  }
  std::filesystem::rename(file_, file_.string() + ".1", ec);
  std::filesystem::remove(file_.string() + "." + std::to_string(keep_ + 1), ec);
  const mode_t old = ::umask(077);
  out_.open(file_, std::ios::trunc);
  ::umask(old);
  size_ = 0;
}

void AuditLog::record(nlohmann::json entry) {
  nlohmann::json line = {{"time", rfc3339_ms_now()}};
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
