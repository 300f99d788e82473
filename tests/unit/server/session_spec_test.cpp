#include <catch2/catch.hpp>

#include "server/api/session_spec.h"

using namespace cabin;
using namespace cabin::api;

TEST_CASE("an empty body takes every default") {
  SpecLimits limits{86400, 600};
  for (const char* body : {"", "  \n", "{}"}) {
    auto s = parse_session_spec(body, limits);
    REQUIRE(s);
    CHECK(s->driver.empty());
    CHECK(s->resolution.width == 1280);
    CHECK(s->resolution.height == 800);
    CHECK(s->timeout_s == 600);
    CHECK(s->start_url.empty());
    CHECK(s->resources.vcpus == 0);
    CHECK(s->resources.memory_mb == 0);
    CHECK(s->idle_timeout_s == 300);
    CHECK(s->on_idle == OnIdle::kDelete);
    CHECK(s->wait_until == WaitUntil::kLoad);
  }
}

TEST_CASE("the idle timeout defaults to the server's, never beyond the lifetime") {
  SpecLimits limits{86400, 3600, 900};
  CHECK(parse_session_spec("{}", limits)->idle_timeout_s == 900);
  CHECK(parse_session_spec(R"({"timeout_s":60})", limits)->idle_timeout_s == 60);
  CHECK(parse_session_spec(R"({"idle_timeout_s":0})", limits)->idle_timeout_s == 0);
  auto s = parse_session_spec(
      R"({"timeout_s":120,"idle_timeout_s":120,"on_idle":"pause","wait_until":"networkidle"})",
      limits);
  REQUIRE(s);
  CHECK(s->idle_timeout_s == 120);
  CHECK(s->on_idle == OnIdle::kPause);
  CHECK(s->wait_until == WaitUntil::kNetworkIdle);
  CHECK(wait_until_name(s->wait_until) == "networkidle");
  CHECK(parse_session_spec(R"({"wait_until":"commit"})", limits)->wait_until == WaitUntil::kCommit);
}

TEST_CASE("a full spec parses") {
  auto s = parse_session_spec(R"({"driver":"namespace","resolution":{"width":1920,"height":1080},
                                  "resources":{"vcpus":4,"memory_mb":4096},
                                  "timeout_s":30,"start_url":"https://example.com/x?y=1"})",
                              SpecLimits{});
  REQUIRE(s);
  CHECK(s->resources.vcpus == 4);
  CHECK(s->resources.memory_mb == 4096);
  CHECK(s->driver == "namespace");
  CHECK(s->resolution.width == 1920);
  CHECK(s->resolution.height == 1080);
  CHECK(s->timeout_s == 30);
  CHECK(s->start_url == "https://example.com/x?y=1");
  // data: URLs as Chromium takes them: spaces and quotes in the payload.
  auto d = parse_session_spec(
      R"({"start_url":"data:text/html,<body style=\"margin: 0\"><p id='x'>hi there</p>"})",
      SpecLimits{});
  REQUIRE(d);
  CHECK(d->start_url == R"(data:text/html,<body style="margin: 0"><p id='x'>hi there</p>)");
  CHECK_FALSE(s->display);
}

TEST_CASE("resources above the server's caps per sandbox are refused, naming the flag") {
  SpecLimits limits;
  limits.max_vcpus = 2;
  limits.max_memory_mb = 1024;
  CHECK(parse_session_spec(R"({"resources":{"vcpus":2,"memory_mb":1024}})", limits));
  auto memory = parse_session_spec(R"({"resources":{"memory_mb":1025}})", limits);
  REQUIRE_FALSE(memory);
  CHECK(memory.error().code == "invalid_request");
  CHECK_THAT(memory.error().message,
             Catch::Contains("resources.memory_mb") && Catch::Contains("--max-sandbox-memory-mb"));
  auto vcpus = parse_session_spec(R"({"resources":{"vcpus":3}})", limits);
  REQUIRE_FALSE(vcpus);
  CHECK_THAT(vcpus.error().message,
             Catch::Contains("resources.vcpus") && Catch::Contains("--max-sandbox-vcpus"));
}

TEST_CASE("a profile names a saved one, kept back only when asked") {
  auto kept = parse_session_spec(R"({"profile":{"id":"prf_0123456789abcdefghij","persist":true}})",
                                 SpecLimits{});
  REQUIRE(kept);
  REQUIRE(kept->profile);
  CHECK(kept->profile->id == "prf_0123456789abcdefghij");
  CHECK(kept->profile->persist);
  auto used = parse_session_spec(R"({"profile":{"id":"prf_0123456789abcdefghij"}})", SpecLimits{});
  REQUIRE(used);
  REQUIRE(used->profile);
  CHECK_FALSE(used->profile->persist);
  CHECK_FALSE(parse_session_spec("{}", SpecLimits{})->profile);
}

TEST_CASE("a recording can start with the session, and without one there is none") {
  auto s = parse_session_spec(R"({"record":{"fps":5,"max_mb":20}})", SpecLimits{});
  REQUIRE(s);
  REQUIRE(s->record);
  CHECK(s->record->fps == 5);
  CHECK(s->record->max_mb == 20);
  CHECK(s->record->quality == RecordingSpec{}.quality);
  CHECK(s->record->max_duration_s == RecordingSpec{}.max_duration_s);
  auto defaults = parse_session_spec(R"({"record":{}})", SpecLimits{});
  REQUIRE(defaults);
  REQUIRE(defaults->record);
  CHECK(defaults->record->fps == 15);
  CHECK_FALSE(parse_session_spec("{}", SpecLimits{})->record);
}

TEST_CASE("a declared display is the model's size, no larger than the resolution") {
  auto s = parse_session_spec(
      R"({"resolution":{"width":1920,"height":1080},"display":{"width":1024,"height":768}})",
      SpecLimits{});
  REQUIRE(s);
  REQUIRE(s->display);
  CHECK(s->display->width == 1024);
  CHECK(s->display->height == 768);
  for (const char* bad : {R"({"display":{"width":1281,"height":800}})",
                          R"({"display":{"width":0,"height":10}})",
                          R"({"display":{"width":100}})", R"({"display":[100,100]})",
                          R"({"display":{"width":100,"height":100,"depth":24}})"}) {
    INFO(bad);
    auto r = parse_session_spec(bad, SpecLimits{});
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("display") != std::string::npos);
  }
}

TEST_CASE("invalid specs name the field and the code") {
  struct Case {
    const char* body;
    const char* code;
    const char* mentions;
  };
  for (const auto& c : std::vector<Case>{
           {"{", "invalid_json", "JSON"},
           {"[1]", "invalid_json", "object"},
           {R"({"bogus":1})", "unknown_field", "bogus"},
           {R"({"resolution":{"width":1280,"height":800,"depth":24}})", "unknown_field",
            "resolution.depth"},
           {R"({"resolution":{"width":0,"height":0}})", "invalid_request", "resolution.width"},
           {R"({"resolution":{"width":100000,"height":100000}})", "invalid_request",
            "resolution.width"},
           {R"({"resolution":{"width":1280}})", "invalid_request", "resolution.height"},
           {R"({"resolution":{"width":"1280","height":800}})", "invalid_request", "integer"},
           {R"({"timeout_s":60,"idle_timeout_s":61})", "invalid_request", "idle_timeout_s"},
           {R"({"idle_timeout_s":-1})", "invalid_request", "idle_timeout_s"},
           {R"({"on_idle":"stop"})", "invalid_request", "on_idle"},
           {R"({"on_idle":1})", "invalid_request", "on_idle"},
           {R"({"wait_until":"domcontentloaded"})", "invalid_request", "wait_until"},
           {R"({"resolution":[1280,800]})", "invalid_request", "resolution"},
           {R"({"resources":{"vcpus":0}})", "invalid_request", "resources.vcpus"},
           {R"({"resources":{"vcpus":17}})", "invalid_request", "resources.vcpus"},
           {R"({"resources":{"memory_mb":100}})", "invalid_request", "resources.memory_mb"},
           {R"({"resources":{"memory_mb":1000000}})", "invalid_request", "resources.memory_mb"},
           {R"({"resources":{"disk_mb":1}})", "unknown_field", "resources.disk_mb"},
           {R"({"resources":2})", "invalid_request", "resources"},
           {R"({"timeout_s":0})", "invalid_request", "timeout_s"},
           {R"({"timeout_s":99999999})", "invalid_request", "timeout_s"},
           {R"({"timeout_s":-5})", "invalid_request", "timeout_s"},
           {R"({"timeout_s":18446744073709551615})", "invalid_request", "timeout_s"},
           {R"({"driver":5})", "invalid_request", "driver"},
           {R"j({"start_url":"javascript:alert(1)"})j", "invalid_request", "start_url"},
           {R"({"start_url":"file:///etc/passwd"})", "invalid_request", "start_url"},
           {R"({"start_url":"http://a b"})", "invalid_request", "start_url"},
           {R"({"start_url":"data:text/html,<p>a\tb</p>"})", "invalid_request", "start_url"},
           {R"({"network":{"mode":"sometimes"}})", "invalid_request", "network.mode"},
           {R"({"profile":"prf_0123456789abcdefghij"})", "invalid_request", "profile"},
           {R"({"profile":{}})", "invalid_request", "profile.id"},
           {R"({"profile":{"id":"prf_short"}})", "invalid_request", "profile.id"},
           {R"({"profile":{"id":7}})", "invalid_request", "profile.id"},
           {R"({"profile":{"id":"prf_0123456789abcdefghij","persist":1}})", "invalid_request",
            "profile.persist"},
           {R"({"profile":{"id":"prf_0123456789abcdefghij","name":"x"}})", "unknown_field",
            "profile.name"},
           {R"({"record":true})", "invalid_request", "record"},
           {R"({"record":{"fps":31}})", "invalid_request", "record.fps"},
           {R"({"record":{"quality":0}})", "invalid_request", "record.quality"},
           {R"({"record":{"max_mb":4097}})", "invalid_request", "record.max_mb"},
           {R"({"record":{"codec":"vp9"}})", "unknown_field", "record.codec"},
           {R"({"network":{"mode":"allowlist","allow":[{"host":"*"}]}})", "invalid_request",
            "network.allow[0].host"},
           {R"({"network":{"mode":"none","secrets":[{"name":"a","value":"v","hosts":["*"]}]}})",
            "invalid_request", "network.secrets[0].hosts[0]"},
       }) {
    INFO(c.body);
    auto s = parse_session_spec(c.body, SpecLimits{});
    REQUIRE_FALSE(s);
    CHECK(s.error().errc == Errc::kInvalidArgument);
    CHECK(s.error().code == c.code);
    CHECK_THAT(s.error().message, Catch::Contains(c.mentions));
  }
}

TEST_CASE("a network policy parses into the spec, and none leaves the server's default") {
  auto none = parse_session_spec("{}", SpecLimits{});
  REQUIRE(none);
  CHECK_FALSE(none->network);
  auto s = parse_session_spec(
      R"({"network":{"mode":"allowlist","allow":[{"host":"Example.COM","ports":[443]}]}})",
      SpecLimits{});
  REQUIRE(s);
  REQUIRE(s->network);
  CHECK(s->network->mode == cabin::egress::Mode::kAllowlist);
  CHECK(s->network->allow.at(0).host->name == "example.com");
}
