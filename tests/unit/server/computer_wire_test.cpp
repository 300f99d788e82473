#include <catch2/catch.hpp>

#include "server/api/computer_wire.h"

using namespace cabin;
using namespace cabin::api;
using nlohmann::json;

namespace {
const computer::ScreenSize kScreen{1920, 1080};
}

TEST_CASE("frame stream queries: jpeg by default, fps checked, the token left out") {
  auto q = frames_agent_query({{"token", "abc"}}, kScreen, false);
  REQUIRE(q);
  CHECK(q->agent_query == "format=jpeg&quality=80&cursor=0&fps=15");
  CHECK(q->format == "jpeg");
  CHECK(q->fps == 15);
  q = frames_agent_query({{"format", "png"}, {"fps", "60"}, {"scale", "0.5"}}, kScreen, false);
  REQUIRE(q);
  CHECK(q->agent_query == "format=png&quality=80&cursor=0&width=960&height=540&fps=60");
  CHECK(frames_agent_query({{"fps", "1"}}, kScreen, true));
  for (const auto& bad : std::vector<std::map<std::string, std::string>>{
           {{"fps", "0"}}, {{"fps", "61"}}, {{"fps", "x"}}, {{"fps", ""}}, {{"format", "gif"}},
           {{"bogus", "1"}}}) {
    CHECK_FALSE(frames_agent_query(bad, kScreen, false));
  }
  auto png = frames_agent_query({{"format", "png"}}, kScreen, true);
  REQUIRE_FALSE(png);
  CHECK(png.error().code == "bad_query");
}

TEST_CASE("screenshot queries are checked and normalised for the agent") {
  CHECK(*screenshot_agent_query({}, kScreen) == "format=png&quality=80&cursor=0");
  CHECK(*screenshot_agent_query({{"format", "jpeg"}, {"quality", "55"}, {"scale", "0.5"}},
                                kScreen) ==
        "format=jpeg&quality=55&cursor=0&width=960&height=540");
  CHECK(*screenshot_agent_query({{"x", "10"}, {"y", "20"}, {"w", "100"}, {"h", "50"},
                                 {"scale", "0.5"}, {"cursor", "1"}},
                                kScreen) ==
        "format=png&quality=80&cursor=1&x=10&y=20&w=100&h=50&width=50&height=25");
  CHECK(*screenshot_agent_query({{"width", "1024"}, {"height", "768"}}, kScreen) ==
        "format=png&quality=80&cursor=0&width=1024&height=768");
  for (const auto& bad : std::vector<std::map<std::string, std::string>>{
           {{"format", "gif"}},
           {{"quality", "0"}},
           {{"quality", "101"}},
           {{"quality", "abc"}},
           {{"scale", "0"}},
           {{"scale", "1.5"}},
           {{"scale", "nan"}},
           {{"width", "100"}},
           {{"width", "0"}, {"height", "10"}},
           {{"width", "100000"}, {"height", "10"}},
           {{"scale", "0.5"}, {"width", "10"}, {"height", "10"}},
           {{"x", "0"}, {"y", "0"}, {"w", "10"}},
           {{"x", "1900"}, {"y", "0"}, {"w", "100"}, {"h", "10"}},
           {{"x", "-1"}, {"y", "0"}, {"w", "10"}, {"h", "10"}},
           {{"cursor", "yes"}},
           {{"bogus", "1"}},
       }) {
    auto r = screenshot_agent_query(bad, kScreen);
    REQUIRE_FALSE(r);
    CHECK(r.error().errc == Errc::kInvalidArgument);
  }
}

TEST_CASE("the agent's batch answer is checked and mapped to the model space") {
  json answer = {{"results",
                  {{{"op", "click"}, {"junk", "dropped"}},
                   {{"op", "cursor_position"}, {"x", 1919}, {"y", 1079}},
                   {{"op", "screenshot"},
                    {"media_type", "image/png"},
                    {"data", "iVBORw0KGgo="},
                    {"width", 1024},
                    {"height", 768}}}},
                 {"screenshot",
                  {{"media_type", "image/jpeg"}, {"data", "/9j/"}, {"width", 1}, {"height", 1}}}};
  auto out = check_computer_answer(answer.dump(), 3, kScreen, computer::Size{1024, 768});
  REQUIRE(out);
  auto& r = (*out)["results"];
  CHECK_FALSE(r[0].contains("junk"));
  CHECK(r[1]["x"] == 1023);
  CHECK(r[1]["y"] == 767);
  CHECK(r[2]["media_type"] == "image/png");
  CHECK((*out)["screenshot"]["media_type"] == "image/jpeg");

  json failed = {{"results", {{{"op", "click"}}}},
                 {"error", {{"index", 1}, {"op", "key"}, {"code", "x"}, {"message", "m"}}}};
  auto f = check_computer_answer(failed.dump(), 2, kScreen, std::nullopt);
  REQUIRE(f);
  CHECK((*f)["error"]["index"] == 1);

  for (const json& bad : std::vector<json>{
           json::array(),
           {{"results", 5}},
           {{"results", {{{"op", "click"}}, {{"op", "click"}}, {{"op", "click"}}}}},  // > actions
           {{"results", {{{"op", 1}}}}},
           {{"results", {{{"op", "cursor_position"}, {"x", 5000}, {"y", 1}}}}},
           {{"results", {{{"op", "cursor_position"}}}}},
           {{"results", {{{"op", "screenshot"}, {"media_type", "text/html"}, {"data", ""},
                          {"width", 1}, {"height", 1}}}}},
           {{"results", {{{"op", "screenshot"}, {"media_type", "image/png"}, {"data", "<x>"},
                          {"width", 1}, {"height", 1}}}}},
           {{"results", {{{"op", "screenshot"}, {"media_type", "image/png"}, {"data", ""},
                          {"width", 0}, {"height", 1}}}}},
           {{"results", json::array()}, {"error", {{"index", 9}}}},
       }) {
    INFO(bad.dump());
    auto r = check_computer_answer(bad.dump(), 2, kScreen, std::nullopt);
    REQUIRE_FALSE(r);
    CHECK(r.error().errc == Errc::kBadGateway);
  }
}

TEST_CASE("a batch's time budget counts its waits") {
  computer::Batch b;
  b.actions.push_back(computer::Wait{5000});
  b.actions.push_back(computer::Hold{{"shift"}, 2000});
  b.actions.push_back(computer::TypeText{"abc", 100});
  CHECK(computer_budget_ms(b) == 60000 + 5000 + 2000 + 300);
}
