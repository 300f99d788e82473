// FakeManager: a SessionManager whose one driver ("namespace") is a FakeDriver, on an in-memory
// store, for unit tests of what sits on sessions.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/clock.h"
#include "server/sessions/session_manager.h"
#include "tests/unit/run_sync.h"
#include "tests/unit/server/fake_sandbox.h"

namespace cabin::testing {

struct FakeManager {
  explicit FakeManager(int max_sessions = 16, std::vector<sessions::PoolConfig> pools = {},
                       std::filesystem::path recordings_dir = {},
                       const std::function<void(sessions::ManagerConfig&)>& tweak = {}) {
    auto d = std::make_unique<FakeDriver>(io.get_executor());
    driver = d.get();
    std::map<std::string, std::unique_ptr<drivers::SandboxDriver>> drivers;
    drivers.emplace("namespace", std::move(d));
    sessions::ManagerConfig config;
    config.max_sessions = max_sessions;
    config.driver_limits["namespace"].start_timeout = std::chrono::seconds(2);
    config.pools = std::move(pools);
    config.recordings_dir = std::move(recordings_dir);
    if (tweak) tweak(config);
    manager = std::make_unique<sessions::SessionManager>(io.get_executor(), config,
                                                         std::move(drivers), *store, clock);
  }

  api::SessionSpec spec(const std::string& body = "{}") {
    auto s = api::parse_session_spec(body, api::SpecLimits{});
    REQUIRE(s.ok());
    return *s;
  }

  Result<sessions::SessionPtr> create(const std::string& body = "{}") {
    return run_sync(io, manager->create(spec(body)));
  }

  sessions::SessionPtr create_ok() {
    auto s = create();
    REQUIRE(s.ok());
    return *s;
  }

  net::io_context io;
  SystemClock clock;
  std::unique_ptr<store::SessionStore> store =
      std::move(store::SessionStore::open(":memory:").value());
  FakeDriver* driver = nullptr;
  std::unique_ptr<sessions::SessionManager> manager;
};

}  // namespace cabin::testing
