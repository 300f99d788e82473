// The audit log's file: one JSON object per line, time added, private, rotated by size.
#include "server/audit/audit_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using cabin::audit::AuditLog;

std::vector<nlohmann::json> lines_of(const fs::path& f) {
  std::vector<nlohmann::json> out;
  std::ifstream in(f);
  for (std::string l; std::getline(in, l);) out.push_back(nlohmann::json::parse(l));
  return out;
}

TEST_CASE("entries are whole JSON lines with their time, in a file only its owner reads") {
  const auto dir = fs::temp_directory_path() / ("cabin-audit-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    AuditLog log(dir / "audit.log");
    log.record({{"action", "exec"}, {"argv", {"echo", "a\nb"}}});
    log.record({{"action", "bad"}, {"argv", {std::string("\xff\xfe")}}});  // not UTF-8
  }
  auto lines = lines_of(dir / "audit.log");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["action"] == "exec");
  CHECK(lines[0]["argv"][1] == "a\nb");
  CHECK(std::string(lines[0]["time"]).size() == 24);  // 2026-12-02T13:04:05.678Z
  CHECK(lines[1]["action"] == "bad");
  struct stat st {};
  REQUIRE(::stat((dir / "audit.log").c_str(), &st) == 0);
  CHECK((st.st_mode & 077) == 0);
  // A reopened log appends.
  AuditLog again(dir / "audit.log");
  again.record({{"action", "third"}});
  CHECK(lines_of(dir / "audit.log").size() == 3);
  fs::remove_all(dir);
}

TEST_CASE("the log rotates by size and keeps a bounded number of old files") {
  const auto dir = fs::temp_directory_path() / ("cabin-audit-rot-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  AuditLog log(dir / "audit.log", 1000, 2);
  for (int i = 0; i < 100; ++i) log.record({{"action", "n"}, {"i", i}});
  CHECK(fs::file_size(dir / "audit.log") <= 1000);
  CHECK(fs::exists(dir / "audit.log.1"));
  CHECK(fs::exists(dir / "audit.log.2"));
  CHECK_FALSE(fs::exists(dir / "audit.log.3"));
  auto newest = lines_of(dir / "audit.log");
  REQUIRE_FALSE(newest.empty());
  CHECK(newest.back()["i"] == 99);
  auto older = lines_of(dir / "audit.log.1");
  REQUIRE_FALSE(older.empty());
  CHECK(older.back()["i"] == newest.front()["i"].get<int>() - 1);  // nothing lost between them
  fs::remove_all(dir);
}

}  // namespace
