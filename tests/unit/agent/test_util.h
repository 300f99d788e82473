// Helpers for the agent's unit tests: temp dirs, scripts, and running a coroutine to completion.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "tests/unit/run_sync.h"

namespace cabin::agent::testing {

namespace net = boost::asio;

// Like cabin-agent's main(): a child that closes its stdin early must not kill the process.
inline const bool kSigpipeIgnored = (::signal(SIGPIPE, SIG_IGN), true);

class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "cabin-agent-test-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string write_script(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  REQUIRE(::chmod(path.c_str(), 0755) == 0);
  return path;
}

using cabin::testing::run_sync;

}  // namespace cabin::agent::testing
