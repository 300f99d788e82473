// FakeClock: a Clock tests set and advance by hand.
#pragma once

#include "common/clock.h"

namespace cabin::testing {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t unix_seconds = 1'800'000'000) { set(unix_seconds); }
  std::chrono::system_clock::time_point now() const override { return now_; }
  void set(int64_t unix_seconds) {
    now_ = std::chrono::system_clock::time_point(std::chrono::seconds(unix_seconds));
  }
  void advance(std::chrono::seconds d) { now_ += d; }

 private:
  std::chrono::system_clock::time_point now_;
};

}  // namespace cabin::testing
