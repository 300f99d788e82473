// Admission of creates in SessionManager: a tenant's quota and rate come first (429 with a
// Retry-After); past the server's cap a create waits in order of arrival for room, and leaves the
// queue when its time runs out, its client leaves or the server drains.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "common/cancellation.h"
#include "server/config.h"
#include "server/metrics/metrics.h"
#include "server/sessions/session_manager.h"
#include "tests/fakes/fake_clock.h"
#include "tests/unit/run_sync.h"
#include "tests/unit/server/fake_sandbox.h"

namespace {

using namespace cabin;
using namespace std::chrono_literals;
using cabin::testing::FakeDriver;
using cabin::testing::run_for;
using cabin::testing::run_sync;
using cabin::testing::run_until;
using sessions::SessionPtr;
using sessions::Tenant;

struct Fixture {
  explicit Fixture(int max_sessions, int queue = 2, std::chrono::milliseconds queue_timeout = 5s) {
    auto d = std::make_unique<FakeDriver>(io.get_executor());
    driver = d.get();
    std::map<std::string, std::unique_ptr<drivers::SandboxDriver>> drivers;
    drivers.emplace("namespace", std::move(d));
    sessions::ManagerConfig config;
    config.max_sessions = max_sessions;
    config.create_queue = queue;
    config.create_queue_timeout = queue_timeout;
    config.driver_limits["namespace"].start_timeout = 2s;
    manager = std::make_unique<sessions::SessionManager>(io.get_executor(), config,
                                                         std::move(drivers), *store, clock);
  }

  // A create running in the background; `result` is set when it answers.
  struct Pending {
    std::optional<Result<SessionPtr>> result;
    Cancellation cancel;
  };
  std::shared_ptr<Pending> start(const Tenant& tenant) {
    auto p = std::make_shared<Pending>();
    net::co_spawn(
        io,
        [](sessions::SessionManager& m, const api::SessionSpec& spec, Tenant tenant,
           std::shared_ptr<Pending> p) -> net::awaitable<void> {
          auto r = co_await m.create(spec, tenant, &p->cancel);
          p->result.emplace(std::move(r));
        }(*manager, spec, tenant, p),
        net::detached);
    return p;
  }
  SessionPtr create_ok(const Tenant& tenant = {}) {
    auto r = run_sync(io, manager->create(spec, tenant));
    REQUIRE(r.ok());
    return *r;
  }
  void end(const SessionPtr& s) { REQUIRE(run_sync(io, manager->end(s->id(), "deleted")).ok()); }
  // Runs the loop until `n` creates wait for room.
  void until_waiting(size_t n) {
    run_until(io, [&] { return manager->queue_waiting() == n; }, 5s);
  }

  net::io_context io;
  testing::FakeClock clock;
  std::unique_ptr<store::SessionStore> store =
      std::move(store::SessionStore::open(":memory:").value());
  FakeDriver* driver = nullptr;
  std::unique_ptr<sessions::SessionManager> manager;
  api::SessionSpec spec = *api::parse_session_spec("{}", api::SpecLimits{});
};

Tenant tenant(const std::string& id, int max_sessions, int per_minute) {
  return Tenant{id, max_sessions, per_minute};
}

TEST_CASE("a tenant over max_sessions gets quota_sessions, with when its first session ends",
          "[admission]") {
  Fixture f(16);
  const auto t = tenant("key_aaaaaaaaaaaaaaaaaaaa", 2, 100);
  auto a = f.create_ok(t);
  f.create_ok(t);
  CHECK(a->record().owner == t.id);
  CHECK(f.store->get(a->id())->owner == t.id);
  CHECK(f.manager->tenant_load(t.id) == 2);
  auto refused = run_sync(f.io, f.manager->create(f.spec, t));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == "quota_sessions");
  CHECK(refused.error().errc == Errc::kTooManyRequests);
  // When the soonest of its sessions would end by itself (its idle timeout here), at most an hour.
  CHECK(refused.error().retry_after_s >= 1);
  CHECK(refused.error().retry_after_s <= 3600);
  // Another tenant and the admin are not held back by it.
  f.create_ok(tenant("key_bbbbbbbbbbbbbbbbbbbb", 1, 100));
  f.create_ok();
  // Once one ends, the tenant may create again.
  f.end(a);
  CHECK(f.manager->tenant_load(t.id) == 1);
  f.create_ok(t);
  CHECK(f.manager->list_of(t.id, false).size() == 2);
}

TEST_CASE("a tenant over its create rate gets rate_creates with the seconds to wait",
          "[admission]") {
  Fixture f(16);
  const auto t = tenant("key_aaaaaaaaaaaaaaaaaaaa", 10, 2);
  f.create_ok(t);
  f.create_ok(t);
  auto refused = run_sync(f.io, f.manager->create(f.spec, t));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == "rate_creates");
  CHECK(refused.error().retry_after_s == 30);
  f.clock.advance(29s);
  CHECK(run_sync(f.io, f.manager->create(f.spec, t)).error().retry_after_s == 1);
  f.clock.advance(1s);
  f.create_ok(t);
}

TEST_CASE("creates past the cap wait in order of arrival and go as room comes", "[admission]") {
  Fixture f(1, 2);
  auto first = f.create_ok();
  auto b = f.start({});
  f.until_waiting(1);
  auto c = f.start({});
  f.until_waiting(2);
  CHECK_FALSE(b->result);
  CHECK_FALSE(c->result);
  // The queue is full: the next is refused at once, with a Retry-After.
  auto full = run_sync(f.io, f.manager->create(f.spec));
  REQUIRE_FALSE(full.ok());
  CHECK(full.error().code == "capacity");
  CHECK(full.error().retry_after_s >= 1);
  CHECK(full.error().message.find("--create-queue") != std::string::npos);

  f.end(first);
  run_until(f.io, [&] { return b->result.has_value(); }, 5s);
  REQUIRE(b->result->ok());
  CHECK((**b->result)->running());
  // c was behind b: it still waits, for b's room now.
  run_for(f.io, 50ms);
  CHECK_FALSE(c->result);
  CHECK(f.manager->queue_waiting() == 1);
  f.end(**b->result);
  run_until(f.io, [&] { return c->result.has_value(); }, 5s);
  CHECK(c->result->ok());
  CHECK(f.manager->queue_waiting() == 0);
}

TEST_CASE("a waiting create times out, or leaves when its client does", "[admission]") {
  Fixture f(1, 4, 300ms);
  auto first = f.create_ok();
  const auto began = std::chrono::steady_clock::now();
  auto late = run_sync(f.io, f.manager->create(f.spec));
  const auto waited = std::chrono::steady_clock::now() - began;
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().code == "capacity");
  CHECK(late.error().retry_after_s >= 1);
  CHECK(waited >= 300ms);
  CHECK(waited < 3s);
  CHECK(f.manager->queue_waiting() == 0);

  auto gone = f.start({});
  auto behind = f.start({});
  f.until_waiting(2);
  gone->cancel.cancel();
  run_until(f.io, [&] { return gone->result.has_value(); }, 2s);
  REQUIRE_FALSE(gone->result->ok());
  CHECK(f.manager->queue_waiting() == 1);
  // The one behind it is now first, and gets the room.
  f.end(first);
  run_until(f.io, [&] { return behind->result.has_value(); }, 2s);
  CHECK(behind->result->ok());
}

TEST_CASE("without a queue a create past the cap is refused at once", "[admission]") {
  Fixture f(1, 0);
  f.create_ok();
  auto r = run_sync(f.io, f.manager->create(f.spec), 1s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == "capacity");
  CHECK(f.manager->queue_waiting() == 0);
}

TEST_CASE("a tenant over its quota never waits in the queue, and its token comes back if it did",
          "[admission]") {
  Fixture f(1, 2, 200ms);
  const auto t = tenant("key_aaaaaaaaaaaaaaaaaaaa", 1, 1);
  auto s = f.create_ok(t);
  auto quota = run_sync(f.io, f.manager->create(f.spec, t), 1s);
  CHECK(quota.error().code == "quota_sessions");
  CHECK(f.manager->queue_waiting() == 0);
  // Another tenant waits for the room, times out, and keeps its one create of the minute.
  const auto u = tenant("key_bbbbbbbbbbbbbbbbbbbb", 1, 1);
  auto timed_out = run_sync(f.io, f.manager->create(f.spec, u));
  CHECK(timed_out.error().code == "capacity");
  f.end(s);
  f.create_ok(u);
}

TEST_CASE("queued creates are told the server is draining", "[admission]") {
  Fixture f(1, 2);
  f.create_ok();
  auto w = f.start({});
  f.until_waiting(1);
  f.manager->set_draining();
  run_until(f.io, [&] { return w->result.has_value(); }, 2s);
  REQUIRE_FALSE(w->result->ok());
  CHECK(w->result->error().code == "draining");
  CHECK(f.manager->queue_waiting() == 0);
  run_sync(f.io, f.manager->shutdown());
}

TEST_CASE("refusals and waits are counted by reason, without ids", "[admission]") {
  Fixture f(1, 0);
  f.create_ok();
  (void)run_sync(f.io, f.manager->create(f.spec));
  const auto text = metrics::registry().exposition();
  CHECK(text.find("cabin_create_refusals_total{reason=\"capacity\"}") != std::string::npos);
  CHECK(text.find("cabin_create_queue_waiting 0") != std::string::npos);
  CHECK_FALSE(std::regex_search(text, std::regex("(ses|key)_[a-z0-9]{20}")));
}

TEST_CASE("the queue's flags: defaults, a flag, the environment, and their bounds",
          "[admission]") {
  auto parse = [](std::vector<std::string> args) {
    args.insert(args.begin(), "cabind");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return cabin::parse_config(static_cast<int>(argv.size()), argv.data());
  };
  ::unsetenv("CABIN_CREATE_QUEUE");
  ::unsetenv("CABIN_CREATE_QUEUE_TIMEOUT_S");
  auto d = parse({});
  REQUIRE_FALSE(d.exit);
  CHECK(d.config.create_queue == 16);
  CHECK(d.config.create_queue_timeout_s == 30);
  auto flags = parse({"--create-queue", "0", "--create-queue-timeout-s", "5"});
  REQUIRE_FALSE(flags.exit);
  CHECK(flags.config.create_queue == 0);
  CHECK(flags.config.create_queue_timeout_s == 5);
  ::setenv("CABIN_CREATE_QUEUE", "3", 1);
  auto env = parse({});
  ::unsetenv("CABIN_CREATE_QUEUE");
  CHECK(env.config.create_queue == 3);
  CHECK(parse({"--create-queue-timeout-s", "0"}).exit);
  CHECK(parse({"--create-queue", "-1"}).exit);
  auto help = parse({"--help"});
  CHECK_THAT(help.message, Catch::Contains("--create-queue-timeout-s"));
}

}  // namespace
