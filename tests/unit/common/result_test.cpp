// CABIN_TRY and CABIN_ASSIGN_OR_RETURN: the error passes through unchanged, the value arrives.
#include "common/result.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>

using namespace cabin;

namespace {

Result<int> parse_digit(char c) {
  if (c < '0' || c > '9') return make_error(Errc::kInvalidArgument, "not_a_digit", "not a digit");
  return c - '0';
}

Result<void> check_even(int n) {
  if (n % 2) return make_error(Errc::kInvalidArgument, "odd", std::to_string(n) + " is odd");
  return {};
}

Result<int> twice_even_digit(char c) {
  CABIN_ASSIGN_OR_RETURN(const int n, parse_digit(c));
  CABIN_TRY(check_even(n));
  return 2 * n;
}

Result<std::unique_ptr<int>> boxed(int n) { return std::make_unique<int>(n); }

Result<int> unbox() {
  CABIN_ASSIGN_OR_RETURN(auto p, boxed(7));  // move-only values are moved out
  CABIN_ASSIGN_OR_RETURN(auto q, boxed(8));  // twice in one function
  return *p + *q;
}

}  // namespace

TEST_CASE("CABIN_TRY and CABIN_ASSIGN_OR_RETURN pass errors on and values through", "[result]") {
  CHECK(*twice_even_digit('4') == 8);
  auto odd = twice_even_digit('3');
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.error().code == "odd");
  CHECK(odd.error().message == "3 is odd");
  auto bad = twice_even_digit('x');
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == "not_a_digit");
  CHECK(*unbox() == 15);
}
