#include "common/clock.h"

#include <cstdio>
#include <ctime>
#include <string>

namespace cabin {

std::string format_rfc3339(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string format_rfc3339_ms(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::string out = format_rfc3339(ms / 1000);
  char frac[8];
  std::snprintf(frac, sizeof frac, ".%03dZ", static_cast<int>(ms % 1000));
  out.pop_back();  // the Z, which goes after the milliseconds
  return out + frac;
}

}  // namespace cabin
