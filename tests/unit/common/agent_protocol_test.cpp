#include <catch2/catch.hpp>

#include "common/agent_protocol.h"

using namespace cabin;
using namespace cabin::agent_protocol;

TEST_CASE("exec requests parse strictly") {
  auto ok = parse_exec_request(R"({"argv":["sh","-c","echo hi"],"timeout_ms":500,"env":{"A":"b"},
                                   "cwd":"/tmp","stdin":"x","max_output_bytes":10})");
  REQUIRE(ok);
  CHECK(ok->argv.size() == 3);
  CHECK(ok->timeout_ms == 500);
  CHECK(ok->env.at("A") == "b");
  CHECK(ok->stdin_data == "x");

  auto round = parse_exec_request(to_json(*ok).dump());
  REQUIRE(round);
  CHECK(round->argv == ok->argv);
  CHECK(round->cwd == "/tmp");

  for (const char* bad : {
           "", "[]", "{", R"({})", R"({"argv":[]})", R"({"argv":"sh"})", R"({"argv":[""]})",
           R"({"argv":[1]})", R"({"argv":["sh"],"timeout_ms":0})",
           R"({"argv":["sh"],"timeout_ms":600001})", R"({"argv":["sh"],"timeout_ms":1.5})",
           R"({"argv":["sh"],"max_output_bytes":99999999999})", R"({"argv":["sh"],"bogus":1})",
           R"({"argv":["sh"],"env":{"A=B":"c"}})", R"({"argv":["sh"],"env":{"A":1}})",
           R"({"argv":["a\u0000b"]})"}) {
    INFO(bad);
    auto r = parse_exec_request(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().errc == Errc::kInvalidArgument);
  }
}

TEST_CASE("exec results from the guest are checked and bounded") {
  ExecResult r;
  r.exit_code = 3;
  r.stdout_data = "out";
  r.stderr_data = "err";
  r.duration_ms = 5;
  auto parsed = parse_exec_result(to_json(r).dump(), 100);
  REQUIRE(parsed);
  CHECK(parsed->exit_code == 3);
  CHECK_FALSE(parsed->signal);

  ExecResult killed;
  killed.signal = 9;
  auto k = parse_exec_result(to_json(killed).dump(), 100);
  REQUIRE(k);
  CHECK_FALSE(k->exit_code);
  CHECK(k->signal == 9);
  CHECK_FALSE(parse_exec_result(R"({"exit_code":300,"signal":null,"timed_out":false,"stdout":"",
      "stderr":"","stdout_truncated":false,"stderr_truncated":false,"duration_ms":1})", 100));
  CHECK(parsed->stdout_data == "out");

  CHECK_FALSE(parse_exec_result("[]", 100));
  CHECK_FALSE(parse_exec_result(R"({"exit_code":"0"})", 100));
  r.stdout_data = std::string(1000, 'x');
  auto big = parse_exec_result(to_json(r).dump(), 10);
  REQUIRE_FALSE(big);
  CHECK(big.error().errc == Errc::kBadGateway);
}

TEST_CASE("navigate requests parse strictly, and what cabind sends parses back") {
  auto ok = parse_navigate_request(R"({"url":"https://example.test/a","wait_until":"networkidle"})");
  REQUIRE(ok);
  CHECK(ok->url == "https://example.test/a");
  CHECK(ok->wait_until == "networkidle");
  auto defaulted = parse_navigate_request(R"({"url":"about:blank"})");
  REQUIRE(defaulted);
  CHECK(defaulted->wait_until == "load");
  auto back = parse_navigate_request(to_json(NavigateRequest{"data:text/html,x", "commit"}).dump());
  REQUIRE(back);
  CHECK(back->url == "data:text/html,x");
  CHECK(back->wait_until == "commit");

  for (const std::string& bad : {
           std::string("{}"),
           std::string(R"({"url":""})"),
           std::string(R"({"url":"a\nb"})"),
           std::string(R"({"url":"a\u0000b"})"),
           std::string(R"({"url":5})"),
           R"({"url":")" + std::string(kMaxNavigateUrl + 1, 'u') + R"("})",
           std::string(R"({"url":"x","wait_until":"soon"})"),
           std::string(R"({"url":"x","extra":1})"),
           std::string("[1]"),
           std::string("not json"),
       }) {
    auto r = parse_navigate_request(bad);
    CHECK_FALSE(r);
    if (!r) CHECK(r.error().errc == Errc::kInvalidArgument);
  }
}

TEST_CASE("browser states are checked and bounded on both sides") {
  auto ok = parse_browser_state(
      R"({"cookies":[{"name":"sid","value":"x","domain":"shop.test","path":"/"}],)"
      R"("urls":["http://shop.test/","data:text/html,<p>hi</p>"]})");
  REQUIRE(ok);
  CHECK((*ok)["cookies"].size() == 1);
  CHECK((*ok)["urls"][1] == "data:text/html,<p>hi</p>");
  CHECK(parse_browser_state(R"({"cookies":[],"urls":[]})"));
  for (const char* bad : {
           "", "[]", R"({"cookies":[]})", R"({"urls":[]})", R"({"cookies":{},"urls":[]})",
           R"({"cookies":[{"name":"a"}],"urls":[]})", R"({"cookies":[{"name":1,"value":"v"}],"urls":[]})",
           R"({"cookies":[7],"urls":[]})", R"({"cookies":[],"urls":[""]})",
           R"({"cookies":[],"urls":["http://a/\nb"]})", R"({"cookies":[],"urls":[3]})",
           R"({"cookies":[],"urls":[],"extra":1})"}) {
    INFO(bad);
    CHECK_FALSE(parse_browser_state(bad));
  }
  std::string many = R"({"cookies":[],"urls":[)";
  for (size_t i = 0; i <= kMaxStatePages; ++i) many += std::string(i ? "," : "") + R"("http://a/")";
  CHECK_FALSE(parse_browser_state(many + "]}"));
  std::string cookies = R"({"urls":[],"cookies":[)";
  for (size_t i = 0; i <= kMaxStateCookies; ++i)
    cookies += std::string(i ? "," : "") + R"({"name":"n","value":"v"})";
  CHECK_FALSE(parse_browser_state(cookies + "]}"));
  CHECK_FALSE(parse_browser_state(std::string(kMaxStateBytes + 1, ' ')));
  std::string deep = R"({"cookies":[{"name":"n","value":"v","x":)";
  for (int i = 0; i < 20; ++i) deep += "[";
  CHECK_FALSE(parse_browser_state(deep));
  CHECK_FALSE(parse_browser_state(R"({"cookies":[],"urls":[")" + std::string(kMaxNavigateUrl + 1, 'a') + R"("]})"));
}
