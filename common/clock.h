// Clock: injected wall-clock time so token expiry and timeouts are testable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace cabin {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::system_clock::time_point now() const = 0;
  int64_t unix_seconds() const {
    return std::chrono::duration_cast<std::chrono::seconds>(now().time_since_epoch()).count();
  }
};

class SystemClock final : public Clock {
 public:
  std::chrono::system_clock::time_point now() const override {
    return std::chrono::system_clock::now();
  }
};

// "2026-11-29T16:36:41Z"
std::string format_rfc3339(int64_t unix_seconds);
// "2026-11-29T16:36:41.123Z"
std::string format_rfc3339_ms(std::chrono::system_clock::time_point t);

}  // namespace cabin
