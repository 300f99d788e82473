// RateLimiter: a token bucket per tenant for session creates: `per_minute` tokens a minute,
// bursts of up to `per_minute`. Time comes from an injected Clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "common/clock.h"

namespace cabin::sessions {

class RateLimiter {
 public:
  explicit RateLimiter(const Clock& clock) : clock_(clock) {}

  // Takes a token from `key`'s bucket. Returns 0 when it did, else the whole seconds until one
  // is there (at least 1), and takes nothing.
  int64_t take(const std::string& key, int per_minute);
  // Puts back a token taken for a create that did not go ahead (capped at the bucket's size).
  void give_back(const std::string& key, int per_minute);
  // Buckets kept (one per tenant that created lately).
  size_t size() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens = 0;
    std::chrono::system_clock::time_point at;
  };
  // The bucket refilled up to now; full when new, or when a full one would be.
  Bucket& refilled(const std::string& key, int per_minute);

  const Clock& clock_;
  std::map<std::string, Bucket> buckets_;
};

}  // namespace cabin::sessions
