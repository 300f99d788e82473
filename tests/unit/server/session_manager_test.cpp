// SessionManager and Session's verbs against a fake sandbox: no Chromium, Xvfb or QEMU.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "server/sessions/session_manager.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/agent_protocol.h"
#include "common/clock.h"
#include "common/spawn.h"
#include "server/metrics/metrics.h"
#include "tests/unit/run_sync.h"
#include "tests/unit/server/fake_manager.h"

namespace {

using namespace cabin;
using namespace std::chrono_literals;
using cabin::testing::FakeDriver;
using cabin::testing::json_answer;
using cabin::testing::run_sync;
using cabin::testing::run_until;
using sessions::SessionManager;
using sessions::SessionPtr;
using store::SessionStatus;

using Fixture = cabin::testing::FakeManager;

TEST_CASE("create answers once the agent is ready, with the session's own secret", "[sessions]") {
  Fixture f;
  SessionPtr s = f.create_ok();
  CHECK(s->running());
  CHECK(f.manager->find(s->id()) == s);
  CHECK(f.manager->live_count() == 1);
  REQUIRE(f.driver->sandboxes.size() == 1);
  auto& box = *f.driver->sandboxes[0];
  CHECK(box.id == s->id());
  REQUIRE_FALSE(box.targets.empty());
  CHECK(box.targets[0].starts_with(agent_protocol::kHealthPath));
  CHECK(box.secret.size() == 64);
  for (const auto& sent : box.secrets) CHECK(sent == box.secret);
  auto stored = f.store->get(s->id());
  REQUIRE(stored);
  CHECK(stored->status == SessionStatus::kRunning);
}

TEST_CASE("each session gets its own agent secret", "[sessions]") {
  Fixture f;
  f.create_ok();
  f.create_ok();
  REQUIRE(f.driver->sandboxes.size() == 2);
  CHECK(f.driver->sandboxes[0]->secret != f.driver->sandboxes[1]->secret);
}

TEST_CASE("exec is typed both ways: the agent's result, or its reason as spawn_failed",
          "[sessions]") {
  Fixture f;
  SessionPtr s = f.create_ok();
  agent_protocol::ExecRequest r;
  r.argv = {"echo", "hi"};
  auto ok = run_sync(f.io, s->exec(r));
  REQUIRE(ok.ok());
  CHECK(ok->exit_code == 0);
  CHECK(ok->stdout_data == "echo hi");
  CHECK(f.driver->sandboxes[0]->targets.back() == agent_protocol::kExecPath);

  f.driver->sandboxes[0]->handler = [](const testing::AgentRequest&) {
    return json_answer(boost::beast::http::status::bad_request,
                       R"({"error":{"code":"spawn_failed","message":"no such program"}})");
  };
  auto refused = run_sync(f.io, s->exec(r));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == "spawn_failed");
  CHECK(refused.error().errc == Errc::kInvalidArgument);
  CHECK(refused.error().message == "no such program");
}

TEST_CASE("a guest answer that is not what the protocol says is agent_error", "[sessions]") {
  Fixture f;
  SessionPtr s = f.create_ok();
  f.driver->sandboxes[0]->handler = [](const testing::AgentRequest&) {
    return json_answer(boost::beast::http::status::ok, R"({"exit_code":"zero"})");
  };
  agent_protocol::ExecRequest r;
  r.argv = {"true"};
  auto bad = run_sync(f.io, s->exec(r));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().errc == Errc::kBadGateway);
}

TEST_CASE("a browser that failed to start fails create and leaves no sandbox", "[sessions]") {
  Fixture f;
  f.driver->handler = [](const testing::AgentRequest&) {
    return json_answer(boost::beast::http::status::ok,
                       R"({"state":"failed","error":"chromium exited with status 1"})");
  };
  auto s = f.create();
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == "sandbox_unavailable");
  CHECK_THAT(s.error().message, Catch::Contains("chromium exited with status 1"));
  REQUIRE(f.driver->sandboxes.size() == 1);
  CHECK(f.driver->sandboxes[0]->destroyed);
  CHECK(f.manager->live_count() == 0);
  auto rows = f.manager->list(true);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].status == SessionStatus::kFailed);
}

TEST_CASE("a recording asked for in the create starts with the session, or the create fails",
          "[sessions]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cabin-rec-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    cabin::testing::FakeManager f(16, {}, dir);
    std::vector<std::string> asked;
    f.driver->handler = [&](const testing::AgentRequest& req) {
      if (std::string(req.target()) != agent_protocol::kRecordingsPath)
        return testing::default_agent_answer(req);
      auto r = agent_protocol::parse_recording_request(req.body());
      REQUIRE(r);
      asked.push_back(r->id);
      CHECK(r->fps == 5);
      agent_protocol::RecordingStatus st{r->id, "recording", "", 0, 0, 0, "/tmp/" + r->id + ".mp4"};
      return json_answer(boost::beast::http::status::ok, agent_protocol::to_json(st).dump());
    };
    auto s = f.create(R"({"record":{"fps":5}})");
    REQUIRE(s.ok());
    REQUIRE(asked.size() == 1);
    auto list = f.manager->recordings((*s)->id());
    REQUIRE(list);
    REQUIRE(list->size() == 1);
    CHECK((*list)[0]["id"] == asked[0]);
    CHECK((*list)[0]["fps"] == 5);

    // The agent cannot record: the session fails and its sandbox goes.
    f.driver->handler = [](const testing::AgentRequest& req) {
      if (std::string(req.target()) != agent_protocol::kRecordingsPath)
        return testing::default_agent_answer(req);
      return json_answer(boost::beast::http::status::internal_server_error,
                         R"({"error":"ffmpeg is missing"})");
    };
    auto failed = f.create(R"({"record":{}})");
    REQUIRE_FALSE(failed.ok());
    CHECK(failed.error().code == "sandbox_unavailable");
    CHECK_THAT(failed.error().message, Catch::Contains("recording could not start"));
    REQUIRE(f.driver->sandboxes.size() == 2);
    run_until(f.io, [&] { return f.driver->sandboxes[1]->destroyed; });
    CHECK(f.manager->live_count() == 1);
    bool found = false;
    for (const auto& row : f.manager->list(true)) {
      if (row.id == (*s)->id()) continue;
      found = true;
      CHECK(row.status == SessionStatus::kFailed);
      CHECK_THAT(row.end_reason, Catch::Contains("recording could not start"));
    }
    CHECK(found);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a driver that cannot start a sandbox fails create, and the record says why",
          "[sessions]") {
  Fixture f;
  f.driver->fail_create = true;
  auto s = f.create();
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == "sandbox_unavailable");
  auto rows = f.manager->list(true);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].status == SessionStatus::kFailed);
  CHECK_THAT(rows[0].end_reason, Catch::Contains("told to fail"));
}

TEST_CASE("a sandbox that ends by itself fails its session, with the reason", "[sessions]") {
  Fixture f;
  SessionPtr s = f.create_ok();
  const std::string id = s->id();
  s.reset();
  f.driver->sandboxes[0]->exit("agent exited with status 1");
  run_until(f.io, [&] { return f.manager->find(id) == nullptr && f.manager->live_count() == 0; });
  auto r = f.manager->record(id);
  REQUIRE(r);
  CHECK(r->status == SessionStatus::kFailed);
  CHECK(r->end_reason == "sandbox exited: agent exited with status 1");
  CHECK(f.driver->sandboxes[0]->destroyed);  // what is left of it is cleaned up all the same
}

TEST_CASE("end destroys the sandbox once, however often it is asked", "[sessions]") {
  Fixture f;
  f.driver->destroy_takes = 50ms;
  SessionPtr s = f.create_ok();
  const std::string id = s->id();
  int answered = 0;
  for (int i = 0; i < 3; ++i) {
    cabin::spawn(
        f.io,
        [&]() -> net::awaitable<void> {
          auto r = co_await f.manager->end(id, "deleted");
          CHECK(r.ok());
          ++answered;
        },
        "end");
  }
  run_until(f.io, [&] { return answered == 3; });
  run_until(f.io, [&] { return f.manager->live_count() == 0; });
  CHECK(f.driver->sandboxes[0]->destroys == 1);
  CHECK_FALSE(s->running());
  auto r = run_sync(f.io, f.manager->end(id, "deleted again"));
  REQUIRE(r.ok());
  CHECK(r->status == SessionStatus::kEnded);
  CHECK(r->end_reason == "deleted");
  auto unknown = run_sync(f.io, f.manager->end("ses_unknown", "x"));
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code == "session_not_found");
}

TEST_CASE("the server's session limit is a 503 capacity error", "[sessions]") {
  Fixture f(2);
  f.create_ok();
  f.create_ok();
  auto third = f.create();
  REQUIRE_FALSE(third.ok());
  CHECK(third.error().code == "capacity");
  CHECK(f.driver->sandboxes.size() == 2);  // refused before any sandbox was made
}

TEST_CASE("revoking tokens bumps the session's generation, kept in the store", "[sessions]") {
  Fixture f;
  SessionPtr s = f.create_ok();
  CHECK(s->token_generation() == 0);
  auto g = f.manager->revoke_tokens(s->id());
  REQUIRE(g.ok());
  CHECK(*g == 1);
  CHECK(s->token_generation() == 1);
  CHECK(f.store->get(s->id())->token_generation == 1);
}

TEST_CASE("shutdown ends every session at once", "[sessions]") {
  Fixture f;
  f.driver->destroy_takes = 100ms;
  for (int i = 0; i < 3; ++i) f.create_ok();
  run_sync(f.io, [&]() -> net::awaitable<bool> {
    co_await f.manager->shutdown(10s);
    co_return true;
  }());
  CHECK(f.manager->live_count() == 0);
  auto& boxes = f.driver->sandboxes;
  REQUIRE(boxes.size() == 3);
  for (auto& b : boxes) CHECK(b->destroyed);
  // Each destroy began before any ended: they ran side by side, not one after another.
  auto first_end = boxes[0]->destroy_ended;
  for (auto& b : boxes) first_end = std::min(first_end, b->destroy_ended);
  for (auto& b : boxes) CHECK(b->destroy_began < first_end);
  for (const auto& r : f.manager->list(true)) CHECK(r.end_reason == "server shutdown");
}

TEST_CASE("shutdown returns at its deadline when a sandbox does not stop", "[sessions]") {
  Fixture f;
  f.driver->destroy_takes = 1h;
  f.create_ok();
  run_sync(
      f.io,
      [&]() -> net::awaitable<bool> {
        co_await f.manager->shutdown(100ms);
        co_return true;
      }(),
      5s);
  CHECK_FALSE(f.driver->sandboxes[0]->destroyed);
}

TEST_CASE("a session no one is present at ends at its idle timeout, and a presence holds it",
          "[sessions]") {
  Fixture f;
  auto spec = f.spec(R"({"idle_timeout_s":1})");
  auto made = run_sync(f.io, f.manager->create(spec));
  REQUIRE(made.ok());
  SessionPtr s = *made;
  const std::string id = s->id();
  CHECK(s->idle_since().has_value());
  std::optional<sessions::Session::Presence> present;
  present.emplace(s);
  CHECK_FALSE(s->idle_since().has_value());
  // Held past its idle timeout, it lives on.
  cabin::testing::run_for(f.io, 1500ms);
  CHECK(s->running());
  present.reset();
  CHECK(s->idle_since().has_value());
  s.reset();
  run_until(f.io, [&] { return f.manager->live_count() == 0; });
  auto r = f.manager->record(id);
  REQUIRE(r);
  CHECK(r->end_reason == "idle");
  CHECK(f.driver->sandboxes[0]->destroyed);
}

TEST_CASE("timers change within bounds, and the expiry moves with the lifetime", "[sessions]") {
  Fixture f;
  SessionPtr s = f.create_ok();
  const auto created = s->record().created_at;
  auto r = f.manager->set_timers(s->id(), 7200, std::nullopt);
  REQUIRE(r.ok());
  CHECK(r->timeout_s == 7200);
  CHECK(r->expires_at == created + 7200);
  CHECK(r->idle_timeout_s == 300);
  CHECK(f.store->get(s->id())->expires_at == created + 7200);
  r = f.manager->set_timers(s->id(), 100, std::nullopt);
  REQUIRE(r.ok());
  CHECK(r->idle_timeout_s == 100);  // capped by the shorter lifetime
  auto over = f.manager->set_timers(s->id(), 100, 101);
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().message.find("at most timeout_s") != std::string::npos);
  CHECK_FALSE(f.manager->set_timers("ses_unknownunknownunkn", 10, std::nullopt).ok());
  CHECK(f.manager->keepalive(s->id()).ok());
}

TEST_CASE("pause and resume: the status, the store and the idle time follow", "[sessions]") {
  Fixture f;
  auto made = run_sync(f.io, f.manager->create(f.spec(R"({"idle_timeout_s":1})")));
  REQUIRE(made.ok());
  SessionPtr s = *made;
  const std::string id = s->id();
  auto p = run_sync(f.io, f.manager->pause(id));
  REQUIRE(p.ok());
  CHECK(p->status == SessionStatus::kPaused);
  CHECK(s->paused());
  CHECK_FALSE(s->running());
  CHECK(f.driver->sandboxes[0]->paused);
  CHECK(f.store->get(id)->status == SessionStatus::kPaused);
  CHECK_FALSE(s->idle_since().has_value());
  // Paused past its idle timeout, it is not ended: a paused session is never idle.
  cabin::testing::run_for(f.io, 1500ms);
  CHECK(f.manager->find(id) == s);
  CHECK(run_sync(f.io, f.manager->pause(id))->status == SessionStatus::kPaused);  // idempotent
  auto r = run_sync(f.io, f.manager->resume(id));
  REQUIRE(r.ok());
  CHECK(r->status == SessionStatus::kRunning);
  CHECK_FALSE(f.driver->sandboxes[0]->paused);
  CHECK(s->idle_since().has_value());
  CHECK(run_sync(f.io, f.manager->resume(id))->status == SessionStatus::kRunning);
  s.reset();
  run_until(f.io, [&] { return f.manager->live_count() == 0; });
  CHECK(f.manager->record(id)->end_reason == "idle");
  auto gone = run_sync(f.io, f.manager->pause(id));
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.error().code == "session_ended");
  CHECK(run_sync(f.io, f.manager->pause("ses_unknownunknownunkn")).error().code ==
        "session_not_found");
}

TEST_CASE("on_idle pause pauses an idle session instead of ending it", "[sessions]") {
  Fixture f;
  auto made =
      run_sync(f.io, f.manager->create(f.spec(R"({"idle_timeout_s":1,"on_idle":"pause"})")));
  REQUIRE(made.ok());
  SessionPtr s = *made;
  run_until(
      f.io, [&] { return s->paused(); }, 5000ms);
  CHECK(f.manager->live_count() == 1);
  CHECK(f.store->get(s->id())->on_idle == "pause");
}

}  // namespace

// The manager a restarted cabind makes: on the same store, with a driver that finds the
// sandboxes the first one left.
struct NextManager {
  explicit NextManager(Fixture& f) {
    auto d = std::make_unique<FakeDriver>(f.io.get_executor());
    d->sandboxes = f.driver->sandboxes;
    driver = d.get();
    std::map<std::string, std::unique_ptr<drivers::SandboxDriver>> drivers;
    drivers.emplace("namespace", std::move(d));
    sessions::ManagerConfig config;
    config.driver_limits["namespace"].start_timeout = std::chrono::seconds(2);
    config.handoff_key = f.manager->config().handoff_key;
    manager = std::make_unique<SessionManager>(f.io.get_executor(), config, std::move(drivers),
                                               *f.store, f.clock);
  }
  FakeDriver* driver = nullptr;
  std::unique_ptr<SessionManager> manager;
};

TEST_CASE("shutdown keeping sessions leaves them to the next manager, which adopts them",
          "[sessions]") {
  Fixture f;
  const std::string running = f.create_ok()->id();
  const std::string paused = f.create_ok()->id();
  REQUIRE(run_sync(f.io, f.manager->pause(paused)).ok());
  run_sync(f.io, [&]() -> net::awaitable<bool> {
    co_await f.manager->shutdown(10s, true);
    co_return true;
  }());
  for (auto& box : f.driver->sandboxes) {
    CHECK(box->released);
    CHECK_FALSE(box->destroyed);
  }
  CHECK(f.store->get(running)->status == SessionStatus::kRunning);
  CHECK(f.store->get(paused)->status == SessionStatus::kPaused);
  // Sealed: the agent's secret is nowhere in the store in the clear.
  const std::string sealed = f.store->handoff(running);
  CHECK_FALSE(sealed.empty());
  CHECK(sealed.find(f.driver->sandboxes[0]->secret) == std::string::npos);

  NextManager next(f);
  auto adopted = run_sync(f.io, next.manager->adopt_all());
  CHECK(adopted == std::set<std::string>{running, paused});
  next.manager->reap_leftovers(adopted);
  SessionPtr r = next.manager->find(running);
  REQUIRE(r);
  CHECK(r->running());
  REQUIRE(next.manager->find(paused));
  CHECK(next.manager->find(paused)->paused());
  // The agent is dialled with the secret it was started with; a frozen one is not dialled.
  auto& box = *f.driver->sandboxes[0];
  CHECK(box.secrets.back() == box.secret);
  const size_t asked = f.driver->sandboxes[1]->targets.size();
  CHECK(run_sync(f.io, next.manager->resume(paused)).ok());
  CHECK(f.driver->sandboxes[1]->targets.size() == asked);
  // And they end as any session does.
  CHECK(run_sync(f.io, next.manager->end(running, "deleted")).ok());
  CHECK(box.destroyed);
  CHECK(f.store->handoff(running).empty());
}

TEST_CASE("at start-up a session whose lifetime passed ends, and one whose sandbox died fails",
          "[sessions]") {
  Fixture f;
  const std::string expired = f.create_ok()->id();
  const std::string lost = f.create_ok()->id();
  const std::string unknown = f.create_ok()->id();
  run_sync(f.io, [&]() -> net::awaitable<bool> {
    co_await f.manager->shutdown(10s, true);
    co_return true;
  }());
  const auto rec = *f.store->get(expired);
  REQUIRE(f.store->set_timers(expired, 1, f.clock.unix_seconds() - 1, 0).ok());
  f.driver->sandboxes[1]->exit("killed while no cabind ran");
  // A sandbox the next manager's store has no live record of: reaped.
  REQUIRE(f.store->set_status(unknown, SessionStatus::kEnded, "deleted", rec.created_at).ok());

  NextManager next(f);
  auto adopted = run_sync(f.io, next.manager->adopt_all());
  CHECK(adopted.empty());
  next.manager->reap_leftovers(adopted);
  CHECK(f.store->get(expired)->status == SessionStatus::kEnded);
  CHECK(f.store->get(expired)->end_reason == "timeout");
  CHECK(f.store->get(lost)->status == SessionStatus::kFailed);
  CHECK(f.store->get(lost)->end_reason.starts_with("sandbox lost while the server was down: "));
  CHECK(f.driver->sandboxes[2]->destroyed);
  CHECK(next.manager->live_count() == 0);
}

namespace {

using cabin::sessions::PoolConfig;

TEST_CASE("a pool is read from DRIVER:WIDTHxHEIGHT:COUNT, and what is wrong is named", "[pools]") {
  auto p = sessions::parse_pool("namespace:1024x768:3");
  REQUIRE(p.ok());
  CHECK(p->driver == "namespace");
  CHECK(p->width == 1024);
  CHECK(p->height == 768);
  CHECK(p->count == 3);
  CHECK(p->name() == "namespace:1024x768");
  for (const char* bad : {"", "namespace", "namespace:1024x768", "docker:1024x768:1",
                          "namespace:1024:1", "namespace:100x768:1", "namespace:1024x768:0",
                          "namespace:1024x768:65", "namespace:1024x768:1:2", "namespace:1024x768:-1",
                          "namespace:1024x768:1x"}) {
    auto r = sessions::parse_pool(bad);
    CHECK_FALSE(r.ok());
    if (!r.ok()) CHECK(r.error().code == "bad_pool");
  }
}

net::awaitable<void> create_into(SessionManager& m, api::SessionSpec spec,
                                 std::vector<Result<SessionPtr>>& out) {
  // Named, not a default argument's temporary: GCC 12 destroys those twice in a co_await.
  const sessions::Tenant tenant;
  out.push_back(co_await m.create(spec, tenant));
}

struct Pooled : Fixture {
  Pooled() : Fixture(16, {PoolConfig{"namespace", 1280, 800, 2}}) {
    manager->start_pools();
    wait_ready(2);
  }
  void wait_ready(int n) {
    run_until(io, [&] { return manager->pools()[0].ready == n && manager->pools()[0].starting == 0; });
  }
};

TEST_CASE("a create the pool serves claims its oldest ready sandbox, and the pool starts another",
          "[pools]") {
  Pooled f;
  REQUIRE(f.driver->sandboxes.size() == 2);
  CHECK(f.manager->live_count() == 0);  // pooled sandboxes are no sessions
  CHECK(f.store->list(true, 10).empty());
  const std::string first = f.driver->sandboxes[0]->id;

  auto s = run_sync(f.io, f.manager->create(
                              f.spec(R"({"start_url": "https://example.test/", "wait_until": "commit"})")));
  REQUIRE(s.ok());
  CHECK((*s)->id() == first);
  CHECK((*s)->running());
  CHECK(f.manager->find(first) == *s);
  auto stored = f.store->get(first);
  REQUIRE(stored);
  CHECK(stored->status == SessionStatus::kRunning);
  CHECK(stored->start_url == "https://example.test/");
  // Its start page was asked for, with the session's own wait.
  auto& box = *f.driver->sandboxes[0];
  REQUIRE_FALSE(box.targets.empty());
  CHECK(box.targets.back() == agent_protocol::kNavigatePath);

  // Its agent's secret is its own, made when the sandbox started, and every call carries it.
  CHECK(box.secret.size() == 64);
  CHECK(box.secret != f.driver->sandboxes[1]->secret);
  for (const auto& sent : box.secrets) CHECK(sent == box.secret);

  f.wait_ready(2);
  CHECK(f.driver->sandboxes.size() == 3);
  CHECK(f.driver->sandboxes[2]->secret != box.secret);
  CHECK(f.driver->sandboxes[2]->secret != f.driver->sandboxes[1]->secret);
  const auto p = f.manager->pools()[0];
  CHECK(p.claims == 1);
  CHECK(p.misses == 0);
  // A second claim takes the other one, never the first again.
  auto t = run_sync(f.io, f.manager->create(f.spec()));
  REQUIRE(t.ok());
  CHECK((*t)->id() == f.driver->sandboxes[1]->id);
}

TEST_CASE("an empty pool counts a miss and the create starts cold, and other sizes never touch it",
          "[pools]") {
  Pooled f;
  auto other = run_sync(f.io, f.manager->create(f.spec(R"({"resolution": {"width": 800, "height": 600}})")));
  REQUIRE(other.ok());
  CHECK(f.manager->pools()[0].ready == 2);
  CHECK(f.manager->pools()[0].claims == 0);
  CHECK(f.manager->pools()[0].misses == 0);
  auto bigger = run_sync(f.io, f.manager->create(f.spec(R"({"resources": {"memory_mb": 4096}})")));
  REQUIRE(bigger.ok());
  CHECK(f.manager->pools()[0].ready == 2);

  // Three at once: two claims, and the third finds the pool empty (no refill is ready so soon).
  std::vector<Result<SessionPtr>> made;
  for (int i = 0; i < 3; ++i) {
    net::co_spawn(f.io, create_into(*f.manager, f.spec(), made), net::detached);
  }
  run_until(f.io, [&] { return made.size() == 3; });
  for (const auto& r : made) CHECK(r.ok());
  CHECK(f.manager->pools()[0].claims == 2);
  CHECK(f.manager->pools()[0].misses == 1);
  CHECK(f.manager->live_count() == 5);
}

TEST_CASE("a pooled sandbox that dies is dropped and replaced, and shutdown destroys the pool",
          "[pools]") {
  Pooled f;
  auto& dead = *f.driver->sandboxes[0];
  dead.exit("chromium killed by signal 9");
  run_until(f.io, [&] { return dead.destroyed && f.driver->sandboxes.size() == 3; });
  f.wait_ready(2);
  CHECK(f.store->list(true, 10).empty());  // nothing of it was ever a session

  const auto ends = [] {
    const std::string text = metrics::registry().exposition();
    const size_t at = text.find("# TYPE cabin_session_ends_total");
    return text.substr(at, text.find("# HELP", at) - at);
  };
  const std::string before = ends();
  f.manager->set_draining();  // as cabind does at SIGTERM
  run_sync(f.io, f.manager->shutdown(std::chrono::seconds(5)));
  for (const auto& box : f.driver->sandboxes) {
    if (box.get() != &dead) CHECK(box->destroyed);
  }
  // Their watchers see them go, and end no session: none was one.
  cabin::testing::run_for(f.io, 50ms);
  CHECK(ends() == before);
  CHECK(f.store->list(true, 10).empty());
}

}  // namespace

namespace {

TEST_CASE("shutdown destroys a pool's sandbox that is still starting", "[pools]") {
  Fixture f(16, {sessions::PoolConfig{"namespace", 1280, 800, 1}});
  // A browser that never gets ready, as a microVM still booting.
  f.driver->handler = [](const testing::AgentRequest& req) {
    if (std::string(req.target()).starts_with(agent_protocol::kHealthPath))
      return json_answer(boost::beast::http::status::ok, R"({"state":"starting"})");
    return testing::default_agent_answer(req);
  };
  f.manager->start_pools();
  run_until(f.io, [&] { return f.driver->sandboxes.size() == 1; });
  CHECK(f.manager->pools()[0].starting == 1);
  f.manager->set_draining();
  run_sync(f.io, f.manager->shutdown(std::chrono::seconds(5)));
  CHECK(f.driver->sandboxes[0]->destroyed);
  CHECK(f.manager->pools()[0].starting == 0);
  CHECK(f.manager->pools()[0].ready == 0);
}

}  // namespace
