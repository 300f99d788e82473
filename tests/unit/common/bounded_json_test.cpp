#include "common/bounded_json.h"

#include <catch2/catch.hpp>
#include <string>

using cabin::JsonLimits;
using cabin::parse_bounded;

TEST_CASE("bounded JSON: documents within the limits parse as nlohmann would") {
  auto r = parse_bounded(R"({"a":[1,{"b":"c"}],"d":null})", {1024, 3, 16});
  REQUIRE(r.ok());
  CHECK((*r)["a"][1]["b"] == "c");
  CHECK((*r)["d"].is_null());
  CHECK(parse_bounded("[[[]]]", {1024, 3, 16}).ok());
}

TEST_CASE("bounded JSON: size, depth, count and syntax each stop the parse with a reason") {
  auto message = [](std::string text, JsonLimits l) {
    auto r = parse_bounded(text, l);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == "invalid_json");
    return r.error().message;
  };
  CHECK(message(std::string(2000, ' ') + "1", {1024, 8, 16}).find("more than 1024") !=
        std::string::npos);
  CHECK(message("[[[[1]]]]", {1024, 3, 16}) == "nested deeper than 3");
  CHECK(message("[1,2,3,4,5]", {1024, 8, 4}) == "more than 4 values");
  CHECK(message(R"({"a":1,"b":2,"c":3})", {1024, 8, 4}) == "more than 4 values");  // keys count
  CHECK(message("[1,", {1024, 8, 16}).rfind("not valid JSON at byte", 0) == 0);
  CHECK(message("{} x", {1024, 8, 16}).rfind("not valid JSON at byte", 0) == 0);
}

TEST_CASE("bounded JSON: a nesting bomb costs nothing beyond its limit") {
  // 8 MiB of '[' fails at the ninth, long before the DOM could grow.
  const std::string bomb(8u << 20, '[');
  auto r = parse_bounded(bomb, {bomb.size(), cabin::kGuestJsonDepth, 1u << 20});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "nested deeper than 8");
}
