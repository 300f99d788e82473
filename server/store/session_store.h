// SessionStore: session records in an embedded SQLite database in the state dir.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace cabin::store {

// Where a session is in its life. Starting, running and paused sessions are live; ending ones
// are being torn down; ended and failed ones are records only. The names are the API's and the
// database's.
enum class SessionStatus { kStarting, kRunning, kPaused, kEnding, kEnded, kFailed };

std::string_view to_string(SessionStatus s);
// Unknown names (a database written by a newer cabind) read as failed.
SessionStatus parse_status(std::string_view name);
inline bool is_live(SessionStatus s) {
  return s == SessionStatus::kStarting || s == SessionStatus::kRunning ||
         s == SessionStatus::kPaused;
}

struct SessionRecord {
  std::string id;
  std::string driver;
  SessionStatus status = SessionStatus::kStarting;
  std::string end_reason;
  int width = 0;
  int height = 0;
  std::string start_url;
  int64_t timeout_s = 0;
  int64_t created_at = 0;  // unix seconds
  int64_t expires_at = 0;
  int64_t ended_at = 0;    // 0 while live
  uint32_t token_generation = 0;  // bumped by revocation; tokens of older generations fail
  int64_t idle_timeout_s = 0;     // 0: never idle
  std::string on_idle = "delete";
  std::string owner = "admin";  // the API key that created it: "admin" or a tenant key's id
};

class SessionStore {
 public:
  // ":memory:" opens a private in-memory database (tests).
  static Result<std::unique_ptr<SessionStore>> open(const std::string& path);
  ~SessionStore();
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  Result<void> insert(const SessionRecord& r);
  Result<void> set_status(const std::string& id, SessionStatus status,
                          const std::string& end_reason, int64_t ended_at);
  Result<void> set_token_generation(const std::string& id, uint32_t generation);
  // What a later cabind needs to adopt a live session's sandbox (JSON; SessionManager's). Kept
  // while the session lives, dropped when it ends: it holds the agent's secret and the
  // session's egress secrets, so the state dir stays private (0700).
  Result<void> set_handoff(const std::string& id, const std::string& handoff);
  std::string handoff(const std::string& id);
  // Preview grants, kept so that a restarted cabind honours the links it handed out.
  struct PreviewRow {
    std::string id;
    std::string session_id;
    int port = 0;
    int64_t created_at = 0;
    int64_t expires_at = 0;
  };
  Result<void> save_preview(const PreviewRow& p);
  Result<void> remove_preview(const std::string& id);
  std::vector<PreviewRow> previews();
  // A new lifetime (PATCH): timeout_s, the expiry it makes, and the idle timeout.
  Result<void> set_timers(const std::string& id, int64_t timeout_s, int64_t expires_at,
                          int64_t idle_timeout_s);
  std::optional<SessionRecord> get(const std::string& id);
  // Newest first; live ones only unless include_ended. At most `limit` rows.
  std::vector<SessionRecord> list(bool include_ended, int limit);
  // The same, of one owner only.
  std::vector<SessionRecord> list_of(const std::string& owner, bool include_ended, int limit);
  // Idempotency-Key of POST /v1/sessions, per tenant: claims `key` for a request whose body
  // hashes to `body_hash`. Claimed: nullopt. Already claimed: what was claimed, with its
  // session id once the create has answered (empty while it runs). Claims older than
  // `keep_s` are dropped first.
  struct IdempotentCreate {
    std::string body_hash;
    std::string session_id;
  };
  Result<std::optional<IdempotentCreate>> claim_idempotency_key(const std::string& tenant,
                                                                const std::string& key,
                                                                const std::string& body_hash,
                                                                int64_t now, int64_t keep_s);
  // The create answered with a session: a retry gets it.
  Result<void> settle_idempotency_key(const std::string& tenant, const std::string& key,
                                      const std::string& session_id);
  // The create failed: a retry may try again.
  Result<void> release_idempotency_key(const std::string& tenant, const std::string& key);
  // At start-up: sessions an earlier run left live are ended with `reason`. Returns their ids.
  std::vector<std::string> end_unfinished(const std::string& reason, int64_t now);

 private:
  explicit SessionStore(sqlite3* db) : db_(db) {}
  Result<void> exec(const char* sql);
  sqlite3* db_;
};

}  // namespace cabin::store
