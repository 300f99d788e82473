// The error catalogue against docs/api.md: every code cabind answers with is documented under
// its one status, and the docs name no code the server does not have.
#include "server/api/errors.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

using namespace cabin;

namespace {

// status -> codes, from the rows of the table under "## Errors".
std::map<int, std::set<std::string>> documented_codes() {
  std::ifstream in(std::string(CABIN_SOURCE_DIR) + "/docs/api.md");
  REQUIRE(in);
  std::map<int, std::set<std::string>> out;
  bool in_errors = false;
  const std::regex row(R"(^\| (\d{3}) \| (.*) \|$)");
  const std::regex code("`([a-z_]+)`");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_errors = line == "## Errors";
    std::smatch m;
    if (!in_errors || !std::regex_match(line, m, row)) continue;
    const int status = std::stoi(m[1]);
    const std::string cells = m[2];
    for (std::sregex_iterator it(cells.begin(), cells.end(), code), end; it != end; ++it) {
      out[status].insert((*it)[1]);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("every catalogued code is in docs/api.md under its status, and only those", "[errors]") {
  const auto docs = documented_codes();
  REQUIRE(docs.size() >= 10);
  std::map<std::string, int> catalogue;
  for (const auto& k : api::error_catalogue()) {
    INFO(k.code);
    CHECK(catalogue.emplace(std::string(k.code), http_status(k.errc)).second);  // one status each
  }
  for (const auto& [code, status] : catalogue) {
    INFO(code << " (" << status << ") is not documented under " << status);
    CHECK(docs.count(status) == 1);
    if (docs.count(status)) CHECK(docs.at(status).count(code) == 1);
  }
  for (const auto& [status, codes] : docs) {
    for (const auto& code : codes) {
      INFO(code << " is documented under " << status);
      REQUIRE(catalogue.count(code) == 1);
      CHECK(catalogue.at(code) == status);
    }
  }
}

TEST_CASE("named errors carry their catalogued status", "[errors]") {
  CHECK(http_status(api::errors::session_not_found().errc) == 404);
  CHECK(api::errors::session_ended("").message == "the session is ending");
  CHECK(api::errors::session_ended("deleted").message == "the session ended: deleted");
  CHECK(http_status(api::errors::uri_too_long("16 KiB").errc) == 414);
  CHECK(http_status(api::errors::unknown_host("x").errc) == 421);
  CHECK(http_status(api::errors::headers_too_large("16 KiB").errc) == 431);
  CHECK(http_status(api::errors::preview_timeout("slow").errc) == 504);
}

namespace {

// Codes cabind makes that no client is ever answered with, and why. Anything else made with
// make_error in cabind's sources must be in the catalogue, under the same status.
const std::map<std::string, std::string> kNeverAnswered = {
    // cabin-gateway's poller: a node's address refuses connections (the client gets
    // node_unavailable).
    {"node_refused", "gateway poller"},
    // Start-up and configuration: cabind stops with the message.
    {"bad_api_key", "start-up"},
    {"bad_key_file", "start-up"},
    {"key_file", "start-up"},
    {"bad_pool", "start-up (--pool)"},
    {"bad_listen", "start-up"},
    {"listen_failed", "start-up"},
    {"dir_not_private", "start-up"},
    {"dir_in_use", "start-up (another cabind holds the run or state dir)"},
    {"tls", "start-up"},
    {"run_dir_untrusted", "start-up"},
    {"no_cgroups", "start-up (the driver's probe)"},
    {"image_corrupt", "the microvm probe: driver_unavailable carries the message"},
    {"image_missing", "the microvm probe: driver_unavailable carries the message"},
    {"invalid_image_manifest", "the microvm probe: driver_unavailable carries the message"},
    {"launcher_usage", "cabin-sandbox's own arguments"},
    // A sandbox's start: sandbox_unavailable carries the message.
    {"invalid_session_id", "a sandbox's start"},
    {"invalid_spec", "a sandbox's start"},
    {"sandbox_exists", "a sandbox's start"},
    {"vm_start_failed", "a sandbox's start"},
    {"vm_start_timeout", "a sandbox's start"},
    {"start_timeout", "a sandbox's start"},
    {"browser_failed", "a sandbox's start"},
    {"sandbox_exited", "a sandbox's start"},
    {"start_page_failed", "a warm pool's sandbox given its start page"},
    // Saving a profile when its session ends: logged, the profile keeps what it had.
    {"profile_too_large", "saving a profile at a session's end"},
    // Inside the drivers: a failed direct path falls back to the agent's tunnel; QMP is how a
    // microVM is stopped.
    {"not_supported", "a direct path the driver lacks"},
    {"sandbox_not_ready", "a direct path not there yet"},
    {"qmp_failed", "stopping a microVM"},
    // Templates: a build or restore that fails is logged, and creates of the shape start cold.
    {"not_snapshottable", "building a template VM"},
    {"foreign_snapshot", "restoring a template VM"},
    // Parsed by the guest's restore helper, which answers only its agent.
    {"bad_restore_line", "the guest's restore helper"},
    // The RFB filter ends a viewer's WebSocket with it as the close reason.
    {"bad_rfb", "a WebSocket close reason"},
    // The egress policy's parsers: invalid_request names the field and carries the message.
    {"invalid_host", "a field of a network policy"},
    {"invalid_cidr", "a field of a network policy"},
    {"invalid_upstream_proxy", "a field of a network policy"},
    // The egress proxy answers the sandbox itself, in its own words.
    {"bad_proxy_request", "the egress proxy's refusal"},
    {"dns_failed", "the egress proxy's refusal"},
    {"egress_failed", "a sandbox's start"},
    // Adopting a sandbox at start-up: the session's end_reason carries the message.
    {"no_handoff", "adopting a session at start-up"},
    {"process_gone", "adopting a session at start-up"},
};

}  // namespace

TEST_CASE("every code cabind makes is catalogued under its status, or never answered", "[errors]") {
  std::map<std::string, Errc> catalogue;
  for (const auto& k : api::error_catalogue()) catalogue.emplace(std::string(k.code), k.errc);
  const std::map<std::string, Errc> errcs = {
      {"kInvalidArgument", Errc::kInvalidArgument},
      {"kUnauthenticated", Errc::kUnauthenticated},
      {"kPermissionDenied", Errc::kPermissionDenied},
      {"kNotFound", Errc::kNotFound},
      {"kMethodNotAllowed", Errc::kMethodNotAllowed},
      {"kConflict", Errc::kConflict},
      {"kTooLarge", Errc::kTooLarge},
      {"kUriTooLong", Errc::kUriTooLong},
      {"kMisdirected", Errc::kMisdirected},
      {"kUnprocessable", Errc::kUnprocessable},
      {"kTooManyRequests", Errc::kTooManyRequests},
      {"kHeadersTooLarge", Errc::kHeadersTooLarge},
      {"kUnavailable", Errc::kUnavailable},
      {"kTimeout", Errc::kTimeout},
      {"kBadGateway", Errc::kBadGateway},
      {"kInternal", Errc::kInternal},
  };
  const std::regex made(R"re(make_error\(\s*Errc::(k\w+),\s*"([a-z_]+)")re");
  const std::filesystem::path root(CABIN_SOURCE_DIR);
  size_t seen = 0;
  // cabind's own code; vnc-forward is a client of cabind and reports to its own terminal.
  for (const char* dir : {"server", "common", "cdp-bridge"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir)) {
      const auto ext = e.path().extension();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
      if (e.path().filename() == "vnc_forward.cpp") continue;
      std::ifstream in(e.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string s = text.str();
      for (std::sregex_iterator it(s.begin(), s.end(), made), end; it != end; ++it) {
        const std::string errc = (*it)[1], code = (*it)[2];
        ++seen;
        INFO(code << " (" << errc << ") in " << e.path().lexically_relative(root).string());
        REQUIRE(errcs.count(errc) == 1);
        if (errcs.at(errc) == Errc::kInternal || kNeverAnswered.count(code)) continue;
        REQUIRE(catalogue.count(code) == 1);
        CHECK(catalogue.at(code) == errcs.at(errc));
      }
    }
  }
  CHECK(seen > 50);
  // And the exceptions are not catalogued codes in disguise.
  for (const auto& [code, why] : kNeverAnswered) {
    INFO(code);
    CHECK(catalogue.count(code) == 0);
  }
}
