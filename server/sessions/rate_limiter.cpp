#include "server/sessions/rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace cabin::sessions {

RateLimiter::Bucket& RateLimiter::refilled(const std::string& key, int per_minute) {
  const auto now = clock_.now();
  const double size = per_minute;
  // Full buckets are forgotten as they are met, so the map stays as small as the busy tenants.
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    const double seconds = std::chrono::duration<double>(now - it->second.at).count();
    // A bucket a minute old is full whatever its rate (at most a minute's worth it holds).
    if (it->first != key && seconds >= 60) {
      it = buckets_.erase(it);
    } else {
      ++it;
    }
  }
  auto [it, fresh] = buckets_.try_emplace(key, Bucket{size, now});
  Bucket& b = it->second;
  if (!fresh) {
    // A clock that steps back adds nothing (nor takes anything away).
    const double seconds = std::max(0.0, std::chrono::duration<double>(now - b.at).count());
    b.tokens = std::min(size, b.tokens + seconds * size / 60.0);
    b.at = now;
  }
  return b;
}

int64_t RateLimiter::take(const std::string& key, int per_minute) {
  if (per_minute <= 0) return 60;
  Bucket& b = refilled(key, per_minute);
  // Within rounding of a whole token is a whole token.
  if (b.tokens >= 1 - 1e-9) {
    b.tokens -= 1;
    return 0;
  }
  // The time until the bucket holds a whole token again, rounded up.
  const double wait = (1 - b.tokens) * 60.0 / per_minute;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait - 1e-9)));
}

void RateLimiter::give_back(const std::string& key, int per_minute) {
  if (per_minute <= 0) return;
  Bucket& b = refilled(key, per_minute);
  b.tokens = std::min<double>(per_minute, b.tokens + 1);
}

}  // namespace cabin::sessions
