#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "server/api/ids.h"
#include "server/gateway/gateway.h"
#include "server/gateway/node_table.h"
#include "server/gateway/route.h"

using namespace cabin;
using namespace cabin::gateway;
using Kind = RouteDecision::Kind;

namespace {
const std::string kSid = "ses_n2_0123456789abcdefghij";
const std::string kPid = "prv_n1_0123456789abcdefghij";
}  // namespace

TEST_CASE("gateway: a request goes to the node its session or preview id names") {
  auto r = route_request("GET", "/v1/sessions/" + kSid + "/cdp?token=x", "", "");
  CHECK(r.kind == Kind::kNode);
  CHECK(r.node == "n2");
  CHECK(r.session_id == kSid);
  CHECK(route_request("DELETE", "/v1/sessions/" + kSid, "", "").node == "n2");
  r = route_request("GET", "/preview/" + kPid + "/index.html", "", "");
  CHECK(r.kind == Kind::kNode);
  CHECK(r.node == "n1");
  // Host-based previews carry the session in the host.
  r = route_request("GET", "/", "p-8080-n2-0123456789abcdefghij.p.example.com", "p.example.com");
  CHECK(r.kind == Kind::kNode);
  CHECK(r.session_id == kSid);
  CHECK(r.node == "n2");
  // An id from a single cabind names no node.
  r = route_request("GET", "/v1/sessions/ses_0123456789abcdefghij", "", "");
  CHECK(r.kind == Kind::kNode);
  CHECK(r.node.empty());

  CHECK(route_request("POST", "/v1/sessions", "", "").kind == Kind::kCreate);
  CHECK(route_request("GET", "/v1/sessions?all=1", "", "").kind == Kind::kList);
  CHECK(route_request("GET", "/readyz", "", "").kind == Kind::kHealth);
  CHECK(route_request("GET", "/v1/info", "", "").kind == Kind::kAny);
  // A malformed id goes to any node, which refuses it as one node would.
  CHECK(route_request("GET", "/v1/sessions/ses_N2_0123456789abcdefghij", "", "").kind == Kind::kAny);
  CHECK(route_request("GET", "/v1/sessions/ses_n2_0123456789abcdefghi", "", "").kind == Kind::kAny);
}

TEST_CASE("ids carry the node that made them") {
  CHECK(api::valid_node_id("n0"));
  CHECK(api::valid_node_id("abcdefghij012345"));
  CHECK_FALSE(api::valid_node_id(""));
  CHECK_FALSE(api::valid_node_id("abcdefghij0123456"));
  CHECK_FALSE(api::valid_node_id("n-1"));
  CHECK_FALSE(api::valid_node_id("N1"));
  CHECK(api::valid_session_id(kSid));
  CHECK(api::node_of_id(kSid) == "n2");
  CHECK(api::node_of_id("ses_0123456789abcdefghij").empty());
  CHECK_FALSE(api::valid_session_id("ses__0123456789abcdefghij"));
  CHECK_FALSE(api::valid_session_id("ses_n2__0123456789abcdefghij"));
  CHECK_FALSE(api::valid_session_id("ses_a_b_0123456789abcdefghij"));
  CHECK(api::valid_preview_id(kPid));
  CHECK_FALSE(api::valid_session_id(kPid));
}

TEST_CASE("gateway: placement takes the node with the most room, and a key's retries the same") {
  NodeTable t;
  const auto now = gateway::Clock::now();
  t.set_addresses({"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"}, now);
  CHECK_FALSE(t.place(""));  // none has answered yet
  t.report("10.0.0.1:8080", {"n0", true, 3, 10, 0});
  t.report("10.0.0.2:8080", {"n1", true, 1, 10, 0});
  t.report("10.0.0.3:8080", {"n2", false, 0, 10, 0});  // draining: no creates
  // n1 has 9 free, n0 7: n1 until the counts even out, then both in turn.
  CHECK(*t.place("") == "10.0.0.2:8080");
  CHECK(*t.place("") == "10.0.0.2:8080");
  CHECK(*t.place("") == "10.0.0.1:8080");
  // A warm pool counts: its sandbox starts in milliseconds.
  t.report("10.0.0.1:8080", {"n0", true, 5, 10, 2});
  t.report("10.0.0.2:8080", {"n1", true, 4, 10, 0});
  CHECK(*t.place("") == "10.0.0.1:8080");

  // An Idempotency-Key lands on one node whatever the load.
  const auto first = *t.place("key-1");
  for (int i = 0; i < 5; ++i) CHECK(*t.place("key-1") == first);
  int spread = 0;
  for (int i = 0; i < 20; ++i) spread += *t.place("k" + std::to_string(i)) == first;
  CHECK(spread < 20);

  // All full: the least full still gets it (it queues the create).
  t.report("10.0.0.1:8080", {"n0", true, 10, 10, 0});
  t.report("10.0.0.2:8080", {"n1", true, 12, 10, 0});
  CHECK(*t.place("") == "10.0.0.1:8080");

  // A node that stops answering gets no creates, and its sessions are unavailable, not gone:
  // at once when nothing listens at its address, after missed polls in a row when it is only slow.
  t.report_failure("10.0.0.1:8080", now, true);
  for (int i = 1; i < gateway::kMissedPollsDown; ++i) {
    t.report_failure("10.0.0.2:8080", now, false);
    CHECK(*t.place("") == "10.0.0.2:8080");  // busy, not gone
    CHECK(t.find("n1").state == Lookup::State::kUp);
  }
  t.report("10.0.0.2:8080", {"n1", true, 4, 10, 0});  // an answer starts the count again
  for (int i = 1; i < gateway::kMissedPollsDown; ++i) t.report_failure("10.0.0.2:8080", now, false);
  CHECK(t.find("n1").state == Lookup::State::kUp);
  t.report_failure("10.0.0.2:8080", now, false);
  CHECK_FALSE(t.place(""));
  CHECK(t.find("n0").state == Lookup::State::kDown);
  CHECK(t.find("n2").state == Lookup::State::kUp);
  CHECK(t.find("n2").address == "10.0.0.3:8080");
  CHECK(t.find("n9").state == Lookup::State::kUnknown);
  // Gone from DNS (a pod being replaced): still down, not unknown.
  t.set_addresses({"10.0.0.3:8080"}, now);
  CHECK(t.find("n0").state == Lookup::State::kDown);
  CHECK(t.up_addresses() == std::vector<std::string>{"10.0.0.3:8080"});
  // A new address that has not answered yet might be any node.
  t.set_addresses({"10.0.0.3:8080", "10.0.0.4:8080"}, now);
  CHECK(t.find("n9").state == Lookup::State::kDown);
}

TEST_CASE("gateway: lists of several nodes merge newest first") {
  using nlohmann::json;
  const std::string a = json{{"sessions", {{{"id", "a1"}, {"created_at", "2026-01-02T00:00:00Z"}},
                                           {{"id", "a2"}, {"created_at", "2026-01-01T00:00:00Z"}}}}}.dump();
  const std::string b = json{{"sessions", {{{"id", "b1"}, {"created_at", "2026-01-03T00:00:00Z"}}}}}.dump();
  auto m = merge_session_lists({a, b});
  REQUIRE(m);
  auto j = json::parse(*m);
  REQUIRE(j["sessions"].size() == 3);
  CHECK(j["sessions"][0]["id"] == "b1");
  CHECK(j["sessions"][2]["id"] == "a2");
  CHECK(json::parse(*merge_session_lists({}))["sessions"].empty());
  // Spliced, not parsed: other members, nesting, escapes and spacing pass through as written.
  m = merge_session_lists({" { \"x\": [1, {\"y\": \"]}\\\"\"}], \"sessions\" : [ "
                           "{\"id\": \"c\", \"n\": {\"created_at\": \"9\"}, \"created_at\": \"2026-01-04T00:00:00Z\"}, "
                           "{\"id\": \"d\"} ] } ", a});
  REQUIRE(m);
  j = json::parse(*m);
  REQUIRE(j["sessions"].size() == 4);
  CHECK(j["sessions"][0]["id"] == "c");
  CHECK(j["sessions"][0]["n"]["created_at"] == "9");
  CHECK(j["sessions"][3]["id"] == "d");  // no created_at: last
  for (const char* bad : {"", "{}", "{\"sessions\": [1,]}", "{\"sessions\": [\"a]}",
                          "{\"sessions\": []} x", "{\"sessions\": [{\"a\" 1}]}"}) {
    INFO(bad);
    CHECK_FALSE(merge_session_lists({bad}));
  }
  CHECK_FALSE(merge_session_lists({"[1]"}));
  CHECK_FALSE(merge_session_lists({"{\"sessions\": 1}"}));
  CHECK_FALSE(merge_session_lists({std::string(40, '[')}));
}
