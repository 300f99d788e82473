// SessionManager and Session's verbs against a fake sandbox: no Chromium, Xvfb or QEMU.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "server/sessions/session_manager.h"

#include <sys/time.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "common/agent_protocol.h"
#include "common/clock.h"
#include "common/spawn.h"
#include "server/api/ids.h"
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

namespace rec_test {

// A temporary recordings dir, removed after the test.
struct RecordingsDir {
  RecordingsDir()
      : path(std::filesystem::temp_directory_path() /
             ("cabin-rec-copy-" + std::to_string(::getpid()) + "-" + std::to_string(++made))) {
    std::filesystem::create_directories(path);
  }
  ~RecordingsDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path path;
  static inline int made = 0;
};

// An agent whose recordings, once stopped, are a file that it says is `claimed` bytes long, of
// which it sends `sent` and then holds the connection open without a word more.
testing::AgentHandler recording_agent(uint64_t claimed, size_t sent) {
  return [=](const testing::AgentRequest& req) {
    const std::string target(req.target());
    agent_protocol::RecordingStatus st;
    st.state = "recording";
    st.path = "/tmp/rec.mp4";
    if (target == agent_protocol::kRecordingsPath) {
      st.id = agent_protocol::parse_recording_request(req.body())->id;
    } else if (target.starts_with(agent_protocol::kRecordingsStopPath)) {
      st.id = target.substr(target.find("id=") + 3);
      st.state = "stopped";
      st.reason = "stopped";
    } else if (target.starts_with(agent_protocol::kRecordingsPath)) {
      st.id = target.substr(target.find("id=") + 3);
    } else if (target.starts_with(agent_protocol::kFilesPath)) {
      testing::AgentResponse res{boost::beast::http::status::ok, 11};
      res.set("X-Fake-Hold", "1");
      res.body() = std::string(sent, 'v');
      res.set(boost::beast::http::field::content_length, std::to_string(claimed));
      return res;
    } else {
      return testing::default_agent_answer(req);
    }
    return json_answer(boost::beast::http::status::ok, agent_protocol::to_json(st).dump());
  };
}

std::string started_recording(testing::FakeManager& f, const SessionPtr& s, int64_t max_mb) {
  api::RecordingSpec spec;
  spec.max_mb = max_mb;
  auto r = run_sync(f.io, f.manager->start_recording(s->id(), spec));
  REQUIRE(r.ok());
  return (*r)["id"].get<std::string>();
}

}  // namespace rec_test

TEST_CASE("a recording is copied out whole when its file is what the sandbox says",
          "[sessions][recordings]") {
  rec_test::RecordingsDir dir;
  cabin::testing::FakeManager f(16, {}, dir.path);
  f.driver->handler = rec_test::recording_agent(3000, 3000);
  SessionPtr s = f.create_ok();
  const std::string rid = rec_test::started_recording(f, s, 1);
  auto r = run_sync(f.io, f.manager->stop_recording(s->id(), rid), 10s);
  REQUIRE(r.ok());
  CHECK((*r)["status"] == "stopped");
  CHECK((*r)["bytes"] == 3000);
  CHECK(std::filesystem::file_size(dir.path / s->id() / (rid + ".mp4")) == 3000);
}

TEST_CASE("a recording longer than its max_mb allows is refused and nothing is kept",
          "[sessions][recordings]") {
  rec_test::RecordingsDir dir;
  cabin::testing::FakeManager f(16, {}, dir.path);
  // A sparse 2 GiB file, or a guest that simply says so.
  f.driver->handler = rec_test::recording_agent(uint64_t{2} << 30, 64 * 1024);
  SessionPtr s = f.create_ok();
  const std::string rid = rec_test::started_recording(f, s, 1);
  CHECK(api::recording_cap_bytes(1) < (uint64_t{2} << 30));
  auto r = run_sync(f.io, f.manager->stop_recording(s->id(), rid), 10s);
  REQUIRE(r.ok());
  CHECK((*r)["status"] == "failed");
  CHECK_THAT((*r)["reason"].get<std::string>(), Catch::Contains("more than max_mb"));
  CHECK((*r)["bytes"] == 0);
  CHECK_FALSE(std::filesystem::exists(dir.path / s->id() / (rid + ".mp4")));
  CHECK_FALSE(std::filesystem::exists(dir.path / s->id() / (rid + ".mp4.part")));
}

TEST_CASE("a sandbox that stops sending its recording cannot hold the session's end",
          "[sessions][recordings]") {
  rec_test::RecordingsDir dir;
  cabin::testing::FakeManager f(16, {}, dir.path, [](sessions::ManagerConfig& c) {
    c.recording_copy_timeout = 1500ms;
    c.recording_stall = 300ms;
  });
  // Within max_mb, but it stops after 4 KiB: a stopped agent.
  f.driver->handler = rec_test::recording_agent(1 << 20, 4096);
  SessionPtr s = f.create_ok();
  const std::string id = s->id();
  const std::string rid = rec_test::started_recording(f, s, 1);
  s.reset();
  const auto t0 = std::chrono::steady_clock::now();
  auto ended = run_sync(f.io, f.manager->end(id, "deleted"), 10s);
  REQUIRE(ended.ok());
  CHECK(std::chrono::steady_clock::now() - t0 < 1500ms);
  CHECK(ended->status == SessionStatus::kEnded);
  CHECK(f.manager->live_count() == 0);
  auto kept = f.manager->recording(id, rid);
  REQUIRE(kept);
  CHECK((*kept)["status"] == "failed");
  CHECK_THAT((*kept)["reason"].get<std::string>(), Catch::Contains("stopped sending"));
  CHECK_FALSE(std::filesystem::exists(dir.path / id / (rid + ".mp4")));
}

TEST_CASE("a tenant's recordings, kept and running, stay within its max_recordings_mb",
          "[sessions][recordings]") {
  rec_test::RecordingsDir dir;
  cabin::testing::FakeManager f(16, {}, dir.path);
  f.driver->handler = rec_test::recording_agent(3000, 3000);
  sessions::Tenant t;
  t.id = "key_rec";
  // Room for two recordings of max_mb 1 (each counts its max_mb and the copy's margin), and a
  // little more.
  t.max_recordings_bytes = 2 * api::recording_cap_bytes(1) + 4096;
  auto made = run_sync(f.io, f.manager->create(f.spec(), t));
  REQUIRE(made.ok());
  const SessionPtr s = *made;
  api::RecordingSpec one;
  one.max_mb = 1;
  auto first = run_sync(f.io, f.manager->start_recording(s->id(), one, t));
  REQUIRE(first.ok());
  auto second = run_sync(f.io, f.manager->start_recording(s->id(), one, t));
  REQUIRE(second.ok());
  auto third = run_sync(f.io, f.manager->start_recording(s->id(), one, t));
  REQUIRE_FALSE(third.ok());
  CHECK(third.error().code == "quota_recordings");
  CHECK(third.error().errc == Errc::kTooManyRequests);
  CHECK_THAT(third.error().message, Catch::Contains("max_recordings_mb"));
  // Stopped, one is its file's 3000 bytes rather than its max_mb: room for another.
  REQUIRE(
      run_sync(f.io, f.manager->stop_recording(s->id(), (*first)["id"].get<std::string>())).ok());
  CHECK(f.manager->recordings_held("key_rec") == 3000 + api::recording_cap_bytes(1));
  CHECK(run_sync(f.io, f.manager->start_recording(s->id(), one, t)).ok());
  // The admin has no budget.
  CHECK(run_sync(f.io, f.manager->start_recording(s->id(), one)).ok());
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

TEST_CASE("budgets add what is held to what is asked, and name the one passed", "[sessions]") {
  using sessions::Budget;
  using sessions::Footprint;
  const uint64_t gib = uint64_t{1} << 30;
  const Footprint held{2, 3 * gib, 4};
  CHECK(sessions::check_tenant_budget(held, {1, gib, 2}, Budget{3, 4 * gib, 6}, 5).ok());
  CHECK(sessions::check_tenant_budget(held, {1, gib, 2}, Budget{}, 5).ok());  // no budgets
  auto sessions_over = sessions::check_tenant_budget(held, {1, 0, 0}, Budget{2, 0, 0}, 5);
  REQUIRE_FALSE(sessions_over.ok());
  CHECK(sessions_over.error().code == "quota_sessions");
  auto memory_over = sessions::check_tenant_budget(held, {1, gib + 1, 0}, Budget{0, 4 * gib, 0}, 7);
  REQUIRE_FALSE(memory_over.ok());
  CHECK(memory_over.error().code == "quota_memory");
  CHECK(memory_over.error().errc == Errc::kTooManyRequests);
  CHECK(memory_over.error().retry_after_s == 7);
  CHECK_THAT(memory_over.error().message, Catch::Contains("4096 MiB") && Catch::Contains("3072"));
  auto vcpus_over = sessions::check_tenant_budget(held, {1, 0, 3}, Budget{0, 0, 6}, 5);
  REQUIRE_FALSE(vcpus_over.ok());
  CHECK(vcpus_over.error().code == "quota_vcpus");
  CHECK(sessions::check_node_memory(3 * gib, gib, 4 * gib, 1).ok());
  CHECK(sessions::check_node_memory(100 * gib, gib, 0, 1).ok());  // no bound
  auto node = sessions::check_node_memory(3 * gib, gib + 1, 4 * gib, 1);
  REQUIRE_FALSE(node.ok());
  CHECK(node.error().code == "capacity_memory");
  CHECK(node.error().errc == Errc::kUnavailable);
}

TEST_CASE("a tenant's memory and vCPU budgets count its live sessions, and no one else's",
          "[sessions]") {
  Fixture f;
  sessions::Tenant small;
  small.id = "key_small";
  small.max_memory_bytes = uint64_t{3} << 30;
  small.max_vcpus = 4;
  auto create = [&](const sessions::Tenant& t, const std::string& body) {
    return run_sync(f.io, f.manager->create(f.spec(body), t));
  };
  REQUIRE(create(small, R"({"resources":{"memory_mb":2048,"vcpus":2}})").ok());
  auto more_memory = create(small, R"({"resources":{"memory_mb":2048}})");
  REQUIRE_FALSE(more_memory.ok());
  CHECK(more_memory.error().code == "quota_memory");
  auto more_vcpus = create(small, R"({"resources":{"memory_mb":1024,"vcpus":3}})");
  REQUIRE_FALSE(more_vcpus.ok());
  CHECK(more_vcpus.error().code == "quota_vcpus");
  CHECK(f.driver->sandboxes.size() == 1);  // refused before any sandbox was made
  // What is left fits; another tenant has its own.
  auto fits = create(small, R"({"resources":{"memory_mb":1024,"vcpus":2}})");
  REQUIRE(fits.ok());
  CHECK(f.manager->tenant_footprint("key_small").memory_bytes == uint64_t{3} << 30);
  CHECK(f.manager->tenant_footprint("key_small").vcpus == 4);
  sessions::Tenant other = small;
  other.id = "key_other";
  CHECK(create(other, R"({"resources":{"memory_mb":2048}})").ok());
  // An ended session gives its share back.
  REQUIRE(run_sync(f.io, f.manager->end((*fits)->id(), "deleted")).ok());
  CHECK(create(small, R"({"resources":{"memory_mb":1024}})").ok());
}

TEST_CASE("no create may promise the node more memory than it gives its sessions", "[sessions]") {
  cabin::testing::FakeManager f(16, {}, {}, [](sessions::ManagerConfig& c) {
    c.memory_bytes = uint64_t{1} << 30;
    c.node_memory_bytes = uint64_t{5} << 30;
  });
  auto a = f.create(R"({"resources":{"memory_mb":2048}})");
  REQUIRE(a.ok());
  REQUIRE(f.create(R"({"resources":{"memory_mb":2048}})").ok());
  CHECK(f.manager->node_memory() == uint64_t{4} << 30);
  auto over = f.create(R"({"resources":{"memory_mb":2048}})");
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == "capacity_memory");
  CHECK(over.error().retry_after_s >= 1);
  CHECK(f.create().ok());  // the default 1 GiB still fits
  REQUIRE(run_sync(f.io, f.manager->end((*a)->id(), "deleted")).ok());
  CHECK(f.create(R"({"resources":{"memory_mb":2048}})").ok());
}

TEST_CASE("a sandbox's tmpfs mounts are each within its memory limit", "[sessions]") {
  for (int64_t mb : {api::kMinMemoryMb, int64_t{1000}, int64_t{2048}, api::kMaxMemoryMb}) {
    const uint64_t bytes = static_cast<uint64_t>(mb) << 20;
    CHECK(drivers::sandbox_tmpfs_bytes(bytes) <= bytes / 2);
  }
}

TEST_CASE("creates are refused while the state dir's file system is nearly full", "[sessions]") {
  rec_test::RecordingsDir dir;
  CHECK(sessions::check_state_disk(dir.path, 0).ok());
  CHECK(sessions::check_state_disk(dir.path, 1).ok());
  const uint64_t more_than_any = uint64_t{1} << 62;
  auto full = sessions::check_state_disk(dir.path, more_than_any);
  REQUIRE_FALSE(full.ok());
  CHECK(full.error().code == "state_disk_full");
  CHECK(full.error().errc == Errc::kUnavailable);
  CHECK_THAT(full.error().message, Catch::Contains("--state-min-free-mb"));
  cabin::testing::FakeManager f(16, {}, {}, [&](sessions::ManagerConfig& c) {
    c.state_dir = dir.path;
    c.state_min_free_bytes = more_than_any;
  });
  auto refused = f.create();
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == "state_disk_full");
  CHECK(f.driver->sandboxes.empty());
}

TEST_CASE("ended sessions' logs and recordings are pruned by age, then oldest first by size",
          "[sessions]") {
  rec_test::RecordingsDir dir;
  const auto logs = dir.path / "logs";
  const auto recs = dir.path / "recordings";
  std::filesystem::create_directories(logs);
  std::filesystem::create_directories(recs);
  const std::time_t now = ::time(nullptr);
  // Files of `bytes` for session `id`, last written `age_s` ago.
  auto leave = [&](const std::string& id, size_t bytes, std::time_t age_s) {
    const std::filesystem::path files[] = {logs / (id + ".log"), logs / (id + ".network.jsonl"),
                                           recs / id / "rec_x.mp4"};
    std::filesystem::create_directories(recs / id);
    for (const auto& p : files) {
      std::ofstream(p) << std::string(bytes, 'x');
      const struct timeval tv[2] = {{now - age_s, 0}, {now - age_s, 0}};
      REQUIRE(::utimes(p.c_str(), tv) == 0);
    }
    const struct timeval tv[2] = {{now - age_s, 0}, {now - age_s, 0}};
    REQUIRE(::utimes((recs / id).c_str(), tv) == 0);
  };
  const std::string old_id = api::new_session_id(), mid_id = api::new_session_id(),
                    new_id = api::new_session_id(), live_id = api::new_session_id();
  leave(old_id, 1000, 10 * 86400);
  leave(mid_id, 1000, 3600);
  leave(new_id, 1000, 60);
  leave(live_id, 1000, 30 * 86400);
  std::ofstream(logs / "not-a-session.log") << "kept";
  auto live = [&](const std::string& id) { return id == live_id; };
  sessions::Retention r;
  r.max_age = std::chrono::hours(7 * 24);
  auto pruned = sessions::prune_state(logs, recs, live, now, r);
  CHECK(pruned.sessions == 1);
  CHECK(pruned.bytes == 3000);
  CHECK_FALSE(std::filesystem::exists(logs / (old_id + ".log")));
  CHECK_FALSE(std::filesystem::exists(recs / old_id));
  CHECK(std::filesystem::exists(logs / (mid_id + ".network.jsonl")));
  // Over the size: the oldest ended one goes until the rest fit.
  r.max_bytes = 4000;
  pruned = sessions::prune_state(logs, recs, live, now, r);
  CHECK(pruned.sessions == 1);
  CHECK_FALSE(std::filesystem::exists(recs / mid_id));
  CHECK(std::filesystem::exists(recs / new_id / "rec_x.mp4"));
  // A live session's files and what is not a session's are never touched.
  CHECK(std::filesystem::exists(logs / (live_id + ".log")));
  CHECK(std::filesystem::exists(recs / live_id));
  CHECK(std::filesystem::exists(logs / "not-a-session.log"));
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
