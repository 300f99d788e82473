#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "server/store/session_store.h"

using namespace cabin::store;

TEST_CASE("the store keeps records and ends leftovers of an earlier run") {
  auto store = SessionStore::open(":memory:");
  REQUIRE(store);
  SessionRecord r;
  r.id = "ses_aaaaaaaaaaaaaaaaaaaa";
  r.driver = "namespace";
  r.status = SessionStatus::kRunning;
  r.width = 1024;
  r.height = 768;
  r.start_url = "about:blank";
  r.timeout_s = 60;
  r.created_at = 100;
  r.expires_at = 160;
  REQUIRE((*store)->insert(r));
  SessionRecord second = r;
  second.id = "ses_bbbbbbbbbbbbbbbbbbbb";
  second.created_at = 200;
  REQUIRE((*store)->insert(second));
  CHECK_FALSE((*store)->insert(second));  // ids are unique

  auto got = (*store)->get(r.id);
  REQUIRE(got);
  CHECK(got->width == 1024);
  CHECK(got->start_url == "about:blank");
  CHECK_FALSE((*store)->get("ses_cccccccccccccccccccc"));

  auto live = (*store)->list(false, 10);
  REQUIRE(live.size() == 2);
  CHECK(live[0].id == second.id);  // newest first

  REQUIRE((*store)->set_status(r.id, SessionStatus::kEnded, "deleted", 150));
  CHECK((*store)->list(false, 10).size() == 1);
  CHECK((*store)->list(true, 10).size() == 2);
  CHECK((*store)->get(r.id)->end_reason == "deleted");

  auto ended = (*store)->end_unfinished("server restarted", 300);
  REQUIRE(ended == std::vector<std::string>{second.id});
  CHECK((*store)->get(second.id)->status == SessionStatus::kEnded);
  CHECK((*store)->list(false, 10).empty());
}

TEST_CASE("the token generation and timers are stored, and older databases gain the columns") {
  auto path = std::filesystem::temp_directory_path() /
              ("cabin-store-" + std::to_string(::getpid()) + ".db");
  std::filesystem::remove(path);
  {
    // A database as earlier versions wrote it: no token_generation column.
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db,
                         "CREATE TABLE sessions (id TEXT PRIMARY KEY, driver TEXT NOT NULL,"
                         " status TEXT NOT NULL, end_reason TEXT NOT NULL DEFAULT '',"
                         " width INTEGER NOT NULL, height INTEGER NOT NULL, start_url TEXT NOT NULL,"
                         " timeout_s INTEGER NOT NULL, created_at INTEGER NOT NULL,"
                         " expires_at INTEGER NOT NULL, ended_at INTEGER NOT NULL DEFAULT 0);"
                         "INSERT INTO sessions VALUES ('ses_aaaaaaaaaaaaaaaaaaaa', 'namespace',"
                         " 'running', '', 1, 1, 'about:blank', 60, 1, 61, 0);",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  {
    auto store = SessionStore::open(path.string());
    REQUIRE(store);
    auto old = (*store)->get("ses_aaaaaaaaaaaaaaaaaaaa");
    REQUIRE(old);
    CHECK(old->token_generation == 0);
    CHECK(old->idle_timeout_s == 0);
    CHECK(old->on_idle == "delete");
    REQUIRE((*store)->set_token_generation(old->id, 3));
    REQUIRE((*store)->set_timers(old->id, 120, 121, 30));
  }
  auto reopened = SessionStore::open(path.string());
  REQUIRE(reopened);
  auto r = (*reopened)->get("ses_aaaaaaaaaaaaaaaaaaaa");
  CHECK(r->token_generation == 3);
  CHECK(r->timeout_s == 120);
  CHECK(r->expires_at == 121);
  CHECK(r->idle_timeout_s == 30);
  std::filesystem::remove(path);
  std::filesystem::remove(path.string() + "-wal");
  std::filesystem::remove(path.string() + "-shm");
}

TEST_CASE("session statuses keep their API names, and unknown ones read as failed", "[store]") {
  for (auto s : {SessionStatus::kStarting, SessionStatus::kRunning, SessionStatus::kPaused,
                 SessionStatus::kEnding, SessionStatus::kEnded, SessionStatus::kFailed}) {
    CHECK(parse_status(to_string(s)) == s);
  }
  CHECK(to_string(SessionStatus::kRunning) == "running");
  CHECK(to_string(SessionStatus::kPaused) == "paused");
  CHECK(parse_status("hibernating") == SessionStatus::kFailed);
  CHECK(is_live(SessionStatus::kStarting));
  CHECK(is_live(SessionStatus::kPaused));
  CHECK_FALSE(is_live(SessionStatus::kEnding));
}

TEST_CASE("an idempotency key is claimed once per tenant, settled, released, and expires",
          "[store]") {
  auto store = SessionStore::open(":memory:");
  REQUIRE(store);
  auto& s = **store;
  auto first = s.claim_idempotency_key("admin", "k1", "h1", 1000, 86400);
  REQUIRE(first);
  CHECK_FALSE(first->has_value());  // claimed
  auto again = s.claim_idempotency_key("admin", "k1", "h2", 1001, 86400);
  REQUIRE(again);
  REQUIRE(again->has_value());
  CHECK((*again)->body_hash == "h1");
  CHECK((*again)->session_id.empty());  // still running
  REQUIRE(s.settle_idempotency_key("admin", "k1", "ses_x"));
  CHECK((*s.claim_idempotency_key("admin", "k1", "h1", 1002, 86400))->session_id == "ses_x");
  // Another tenant's key of the same name is its own.
  CHECK_FALSE(s.claim_idempotency_key("tenant2", "k1", "h9", 1003, 86400)->has_value());
  // Released, it can be claimed again; expired, too.
  REQUIRE(s.release_idempotency_key("tenant2", "k1"));
  CHECK_FALSE(s.claim_idempotency_key("tenant2", "k1", "h9", 1004, 86400)->has_value());
  CHECK_FALSE(s.claim_idempotency_key("admin", "k1", "h7", 1000 + 86401, 86400)->has_value());
}

TEST_CASE("preview grants and a live session's handoff are kept, and an ended session's is dropped",
          "[store]") {
  auto store = SessionStore::open(":memory:");
  REQUIRE(store.ok());
  auto& db = **store;
  SessionRecord r;
  r.id = "ses_handoff0000000000000";
  r.driver = "namespace";
  r.created_at = 100;
  r.expires_at = 200;
  REQUIRE(db.insert(r).ok());
  REQUIRE(db.set_handoff(r.id, R"({"secret":"s"})").ok());
  CHECK(db.handoff(r.id) == R"({"secret":"s"})");
  REQUIRE(db.set_status(r.id, SessionStatus::kEnded, "deleted", 150).ok());
  CHECK(db.handoff(r.id).empty());
  REQUIRE(db.set_handoff(r.id, R"({"secret":"again"})").ok());
  CHECK(db.handoff(r.id).empty());  // not for an ended session

  REQUIRE(db.save_preview({"prv_a", r.id, 8000, 100, 700}).ok());
  REQUIRE(db.save_preview({"prv_b", r.id, 8001, 100, 800}).ok());
  REQUIRE(db.save_preview({"prv_a", r.id, 8000, 100, 900}).ok());  // replaced, not doubled
  REQUIRE(db.remove_preview("prv_b").ok());
  auto kept = db.previews();
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].id == "prv_a");
  CHECK(kept[0].port == 8000);
  CHECK(kept[0].expires_at == 900);
}
