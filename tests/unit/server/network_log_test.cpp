// The network log's file: a refusal repeated takes one line and a count, not a line each, while
// memory keeps every record.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "server/egress/network_log.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/fakes/temp_dir.h"

using namespace cabin::egress;
using nlohmann::json;

TEST_CASE("repeated refusals take one line of the file, and memory keeps each", "[egress]") {
  cabin::testing::TempDir t;
  const auto file = t.path / "ses.network.jsonl";
  EgressRecord deny;
  deny.kind = "connect";
  deny.host = "blocked.test";
  deny.port = 443;
  deny.reason = "the policy's mode is none";
  deny.status = 403;
  {
    NetworkLog log(file);
    for (int i = 0; i < 1000; ++i) {
      deny.time_ms = i;
      log.append(deny);
    }
    EgressRecord other = deny;
    other.port = 80;  // another refusal: a line of its own
    log.append(other);
    log.append(deny);
    log.append(deny);
    CHECK(log.since(0, 5000).size() == 1003);
  }
  std::vector<json> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  REQUIRE(lines.size() == 5);
  CHECK(lines[0]["seq"] == 1);
  CHECK(lines[0]["host"] == "blocked.test");
  CHECK(lines[1]["kind"] == "repeated");
  CHECK(lines[1]["count"] == 999);
  CHECK(lines[1]["seq"] == 1000);
  CHECK(lines[2]["seq"] == 1001);
  CHECK(lines[2]["port"] == 80);
  CHECK(lines[3]["seq"] == 1002);
  // The last repeats are written when the log ends.
  CHECK(lines[4]["kind"] == "repeated");
  CHECK(lines[4]["count"] == 1);
  CHECK(std::filesystem::file_size(file) < 2048);
  CHECK(NetworkLog::read_file(file, 0)->size() == 5);
}
