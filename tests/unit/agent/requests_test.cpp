#include "vm-images/agent/requests.h"

#include "common/agent_protocol.h"

#include <catch2/catch.hpp>

#include "vm-images/agent/supervisor.h"

using namespace cabin::agent;
using cabin::Errc;

TEST_CASE("exec spec: minimal request takes the defaults", "[agent][requests]") {
  auto s = cabin::agent_protocol::parse_exec_request(R"({"argv":["echo","hi"]})");
  REQUIRE(s.ok());
  CHECK(s->argv == std::vector<std::string>{"echo", "hi"});
  CHECK(s->timeout_ms == 30000);
  CHECK(s->max_output_bytes == 1u << 20);
  CHECK(s->env.empty());
  CHECK_FALSE(s->cwd.has_value());
  CHECK(s->stdin_data.empty());
}

TEST_CASE("exec spec: every field", "[agent][requests]") {
  auto s = cabin::agent_protocol::parse_exec_request(R"({"argv":["sh","-c","cat"],"timeout_ms":5,"max_output_bytes":0,)"
                           R"("env":{"A":"1","B":""},"cwd":"/tmp","stdin":"x"})");
  REQUIRE(s.ok());
  CHECK(s->timeout_ms == 5);
  CHECK(s->max_output_bytes == 0);
  CHECK(s->env.size() == 2);
  CHECK(*s->cwd == "/tmp");
  CHECK(s->stdin_data == "x");
}

TEST_CASE("exec spec: rejects bad input with 400", "[agent][requests]") {
  const char* bad[] = {
      "",                                        // not JSON
      "{",                                       // truncated
      "[]",                                      // not an object
      "{}",                                      // argv missing
      R"({"argv":[]})",                          // empty argv
      R"({"argv":"ls"})",                        // not an array
      R"({"argv":[1]})",                         // not strings
      R"({"argv":[""]})",                        // empty program
      R"({"argv":["a\u0000b"]})",                // NUL cannot reach exec
      R"({"argv":["ls"],"extra":1})",            // unknown field
      R"({"argv":["ls"],"timeout_ms":0})",       // below range
      R"({"argv":["ls"],"timeout_ms":600001})",  // above range
      R"({"argv":["ls"],"timeout_ms":1.5})",     // not an integer
      R"({"argv":["ls"],"timeout_ms":"10"})",    // a string
      R"({"argv":["ls"],"timeout_ms":-1})",      // negative
      R"({"argv":["ls"],"max_output_bytes":16777217})",
      R"({"argv":["ls"],"env":{"A=B":"x"}})",  // '=' in a name
      R"({"argv":["ls"],"env":{"":"x"}})",     // empty name
      R"({"argv":["ls"],"env":{"A":1}})",      // value not a string
      R"({"argv":["ls"],"env":[]})",           // not an object
      R"({"argv":["ls"],"cwd":""})",
      R"({"argv":["ls"],"stdin":5})",
  };
  for (const char* body : bad) {
    INFO(body);
    auto s = cabin::agent_protocol::parse_exec_request(body);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().errc == Errc::kInvalidArgument);
  }
}

TEST_CASE("exec spec: argument and size limits", "[agent][requests]") {
  std::string many = R"({"argv":[)";
  for (int i = 0; i < 4096; ++i) many += (i ? ",\"a\"" : "\"a\"");
  CHECK(cabin::agent_protocol::parse_exec_request(many + "]}").ok());
  CHECK_FALSE(cabin::agent_protocol::parse_exec_request(many + ",\"a\"]}").ok());

  CHECK(cabin::agent_protocol::parse_exec_request(R"({"argv":["ls"],"max_output_bytes":16777216,"timeout_ms":600000})").ok());
  std::string big_stdin(1u << 20, 'x');
  CHECK(cabin::agent_protocol::parse_exec_request(R"({"argv":["cat"],"stdin":")" + big_stdin + "\"}").ok());
  CHECK_FALSE(cabin::agent_protocol::parse_exec_request(R"({"argv":["cat"],"stdin":")" + big_stdin + "x\"}").ok());
}

TEST_CASE("health query", "[agent][requests]") {
  CHECK(parse_health_query("")->wait.count() == 0);
  CHECK(parse_health_query("wait_ms=0")->wait.count() == 0);
  CHECK(parse_health_query("wait_ms=60000")->wait.count() == 60000);
  for (const char* q : {"wait_ms=60001", "wait_ms=", "wait_ms=-1", "wait_ms=1e3", "wait_ms=01",
                        "wait=5", "wait_ms=5&x=1", "x"}) {
    INFO(q);
    CHECK_FALSE(parse_health_query(q).ok());
  }
}

TEST_CASE("CONNECT target: loopback only, strict port", "[agent][requests]") {
  auto v4 = parse_connect_target("127.0.0.1:9222");
  REQUIRE(v4.ok());
  CHECK(v4->host == ConnectTarget::Host::kIpv4Loopback);
  CHECK(v4->port == 9222);
  CHECK(parse_connect_target("localhost:1")->host == ConnectTarget::Host::kLocalhost);
  auto v6 = parse_connect_target("[::1]:65535");
  REQUIRE(v6.ok());
  CHECK(v6->host == ConnectTarget::Host::kIpv6Loopback);
  CHECK(v6->port == 65535);

  for (const char* t : {"10.0.0.1:80",
                        "169.254.169.254:80",
                        "0.0.0.0:9222",
                        "127.0.0.2:9222",
                        "127.1:9222",
                        "2130706433:80",
                        "example.com:443",
                        "LOCALHOST:80",
                        "::1:80",
                        "[::ffff:127.0.0.1]:80",
                        "[::1]",
                        "127.0.0.1",
                        "127.0.0.1:",
                        "127.0.0.1:0",
                        "127.0.0.1:65536",
                        "127.0.0.1:99999999999",
                        "127.0.0.1:+80",
                        "127.0.0.1:080",
                        "127.0.0.1: 80",
                        "127.0.0.1:80 ",
                        "127.0.0.1:80/x",
                        "user@127.0.0.1:80",
                        "/agent/v1/health",
                        "",
                        ":80"}) {
    INFO(t);
    auto r = parse_connect_target(t);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().errc == Errc::kPermissionDenied);
  }
}

TEST_CASE("listen address", "[agent][requests]") {
  auto u = parse_listen_address("unix:/run/cabin/agent.sock");
  REQUIRE(u.ok());
  CHECK(u->kind == ListenAddress::Kind::kUnix);
  CHECK(u->path == "/run/cabin/agent.sock");
  auto t = parse_listen_address("tcp:0.0.0.0:7000");
  REQUIRE(t.ok());
  CHECK(t->kind == ListenAddress::Kind::kTcp);
  CHECK(t->host == "0.0.0.0");
  CHECK(t->port == 7000);
  auto t6 = parse_listen_address("tcp:[::1]:0");
  REQUIRE(t6.ok());
  CHECK(t6->host == "::1");
  auto f = parse_listen_address("fd:3");
  REQUIRE(f.ok());
  CHECK(f->kind == ListenAddress::Kind::kFd);
  CHECK(f->fd == 3);
  for (const char* a : {"", "unix:", "tcp:", "tcp:1.2.3.4", "tcp:host:80", "tcp:1.2.3.4:65536",
                        "tcp:::1:80", "/tmp/x.sock", "udp:1.2.3.4:5", "fd:", "fd:2", "fd:03",
                        "fd:-3", "fd:1024", "fd:3x"}) {
    INFO(a);
    CHECK_FALSE(parse_listen_address(a).ok());
  }
  CHECK_FALSE(parse_listen_address("unix:/" + std::string(200, 'a')).ok());
}

TEST_CASE("DevToolsActivePort parsing", "[agent][supervisor]") {
  const std::string path = "/devtools/browser/08523fd9-3f35-41d2-87a3-cd2989f6fd79";
  auto ep = parse_devtools_active_port("9222\n" + path);
  REQUIRE(ep.has_value());
  CHECK(ep->port == 9222);
  CHECK(ep->browser_path == path);
  CHECK(parse_devtools_active_port("9222\n" + path + "\n").has_value());
  CHECK_FALSE(parse_devtools_active_port("").has_value());
  CHECK_FALSE(parse_devtools_active_port("9222").has_value());
  CHECK_FALSE(parse_devtools_active_port("9222\n").has_value());
  CHECK_FALSE(parse_devtools_active_port("9222\n/devtools/browser/08523fd9").has_value());  // half
  CHECK_FALSE(parse_devtools_active_port("0\n" + path).has_value());
  CHECK_FALSE(parse_devtools_active_port("70000\n" + path).has_value());
  CHECK_FALSE(parse_devtools_active_port("x\n" + path).has_value());
  CHECK_FALSE(parse_devtools_active_port("9222\n/devtools/page/" + path.substr(18)).has_value());
}

TEST_CASE("Chromium flags and sandbox decision", "[agent][supervisor]") {
  CHECK(chromium_no_sandbox(ChromiumSandbox::kAuto, 0, false));
  CHECK(chromium_no_sandbox(ChromiumSandbox::kAuto, 1000, true));
  CHECK_FALSE(chromium_no_sandbox(ChromiumSandbox::kAuto, 1000, false));
  CHECK_FALSE(chromium_no_sandbox(ChromiumSandbox::kOn, 0, true));
  CHECK(chromium_no_sandbox(ChromiumSandbox::kOff, 1000, false));

  SupervisorOptions o;
  o.home = "/home/cabin";
  o.width = 1024;
  o.height = 768;
  o.start_url = "https://example.com/";
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  auto a = chromium_argv(o, false, false);
  CHECK(a.front() == "/usr/bin/chromium");
  CHECK(has(a, "--remote-debugging-address=127.0.0.1"));
  CHECK(has(a, "--remote-debugging-port=0"));  // Chromium picks; see SupervisorOptions
  CHECK(has(a, "--user-data-dir=/home/cabin/chromium"));
  CHECK(has(a, "--window-size=1024,768"));
  CHECK(has(a, "--password-store=basic"));
  // Children wait for the browser as long as the start may take (90 s), not Chromium's 15 s.
  CHECK(has(a, "--ipc-connection-timeout=90"));
  CHECK_FALSE(has(a, "--no-sandbox"));
  CHECK_FALSE(has(a, "--disable-dev-shm-usage"));
  // The URL comes last, after "--", so it is never parsed as a switch.
  REQUIRE(a.size() >= 2);
  CHECK(a[a.size() - 2] == "--");
  CHECK(a.back() == "https://example.com/");
  auto b = chromium_argv(o, true, true);
  CHECK(has(b, "--no-sandbox"));
  CHECK(has(b, "--disable-dev-shm-usage"));
}
