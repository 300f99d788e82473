// RateLimiter: a token bucket per tenant, on an injected clock.
#include "server/sessions/rate_limiter.h"

#include <catch2/catch.hpp>

#include "tests/fakes/fake_clock.h"

namespace {

using namespace std::chrono_literals;
using cabin::sessions::RateLimiter;
using cabin::testing::FakeClock;

TEST_CASE("a bucket allows a burst of its size, then one per its share of a minute", "[rate]") {
  FakeClock clock;
  RateLimiter rates(clock);
  for (int i = 0; i < 6; ++i) CHECK(rates.take("a", 6) == 0);
  // Empty: a token comes every 10 s.
  CHECK(rates.take("a", 6) == 10);
  clock.advance(4s);
  CHECK(rates.take("a", 6) == 6);
  clock.advance(6s);
  CHECK(rates.take("a", 6) == 0);
  CHECK(rates.take("a", 6) == 10);
  // A minute refills the whole bucket, never more.
  clock.advance(600s);
  for (int i = 0; i < 6; ++i) CHECK(rates.take("a", 6) == 0);
  CHECK(rates.take("a", 6) > 0);
}

TEST_CASE("tenants have buckets of their own", "[rate]") {
  FakeClock clock;
  RateLimiter rates(clock);
  CHECK(rates.take("a", 1) == 0);
  CHECK(rates.take("a", 1) == 60);
  CHECK(rates.take("b", 1) == 0);
  CHECK(rates.take("b", 1) == 60);
}

TEST_CASE("the wait is rounded up to whole seconds and never 0 while empty", "[rate]") {
  FakeClock clock;
  RateLimiter rates(clock);
  for (int i = 0; i < 7; ++i) REQUIRE(rates.take("a", 7) == 0);
  // 60/7 = 8.57 s per token.
  CHECK(rates.take("a", 7) == 9);
  clock.advance(8s);
  CHECK(rates.take("a", 7) == 1);
  clock.advance(1s);
  CHECK(rates.take("a", 7) == 0);
}

TEST_CASE("a token given back can be taken again, up to the bucket's size", "[rate]") {
  FakeClock clock;
  RateLimiter rates(clock);
  CHECK(rates.take("a", 1) == 0);
  rates.give_back("a", 1);
  CHECK(rates.take("a", 1) == 0);
  CHECK(rates.take("a", 1) > 0);
  rates.give_back("b", 2);  // a full bucket stays full
  CHECK(rates.take("b", 2) == 0);
  CHECK(rates.take("b", 2) == 0);
  CHECK(rates.take("b", 2) > 0);
}

TEST_CASE("a clock that steps back adds nothing, and idle buckets are forgotten", "[rate]") {
  FakeClock clock;
  RateLimiter rates(clock);
  CHECK(rates.take("a", 2) == 0);
  CHECK(rates.take("a", 2) == 0);
  clock.advance(-3600s);
  CHECK(rates.take("a", 2) == 30);
  clock.advance(3600s + 61s);
  CHECK(rates.take("b", 2) == 0);
  // a's bucket was full again, so it is no longer kept.
  CHECK(rates.size() == 1);
  CHECK(rates.take("a", 2) == 0);
}

}  // namespace
