// The error catalogue against docs/api.md: every code cabind answers with is documented under
// its one status, and the docs name no code the server does not have.
#include "server/api/errors.h"

#include <catch2/catch.hpp>
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
