#include "server/store/session_store.h"

#include <sys/stat.h>

#include <utility>

#include "server/store/sqlite_stmt.h"

namespace cabin::store {

std::string_view to_string(SessionStatus s) {
  switch (s) {
    case SessionStatus::kStarting:
      return "starting";
    case SessionStatus::kRunning:
      return "running";
    case SessionStatus::kPaused:
      return "paused";
    case SessionStatus::kEnding:
      return "ending";
    case SessionStatus::kEnded:
      return "ended";
    case SessionStatus::kFailed:
      return "failed";
  }
  return "failed";
}

SessionStatus parse_status(std::string_view name) {
  for (auto s : {SessionStatus::kStarting, SessionStatus::kRunning, SessionStatus::kPaused,
                 SessionStatus::kEnding, SessionStatus::kEnded}) {
    if (to_string(s) == name) return s;
  }
  return SessionStatus::kFailed;
}
namespace {

constexpr const char* kColumns =
    "id, driver, status, end_reason, width, height, start_url, timeout_s, created_at, "
    "expires_at, ended_at, token_generation, idle_timeout_s, on_idle, owner";

SessionRecord read_row(const Stmt& s) {
  SessionRecord r;
  r.id = s.text(0);
  r.driver = s.text(1);
  r.status = parse_status(s.text(2));
  r.end_reason = s.text(3);
  r.width = static_cast<int>(s.integer(4));
  r.height = static_cast<int>(s.integer(5));
  r.start_url = s.text(6);
  r.timeout_s = s.integer(7);
  r.created_at = s.integer(8);
  r.expires_at = s.integer(9);
  r.ended_at = s.integer(10);
  r.token_generation = static_cast<uint32_t>(s.integer(11));
  r.idle_timeout_s = s.integer(12);
  r.on_idle = s.text(13);
  r.owner = s.text(14);
  return r;
}

}  // namespace

Result<std::unique_ptr<SessionStore>> SessionStore::open(const std::string& path) {
  auto opened = open_database(path);
  if (!opened) return opened.error();
  sqlite3* db = *opened;
  std::unique_ptr<SessionStore> store(new SessionStore(db));
  // It keeps live sessions' handoffs (their agents' and egress secrets): owner only.
  if (path != ":memory:") ::chmod(path.c_str(), 0600);
  auto r = store->exec(
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
      "CREATE TABLE IF NOT EXISTS sessions ("
      " id TEXT PRIMARY KEY, driver TEXT NOT NULL, status TEXT NOT NULL,"
      " end_reason TEXT NOT NULL DEFAULT '', width INTEGER NOT NULL, height INTEGER NOT NULL,"
      " start_url TEXT NOT NULL, timeout_s INTEGER NOT NULL, created_at INTEGER NOT NULL,"
      " expires_at INTEGER NOT NULL, ended_at INTEGER NOT NULL DEFAULT 0);"
      "CREATE INDEX IF NOT EXISTS sessions_created ON sessions(created_at);"
      "CREATE TABLE IF NOT EXISTS idempotency ("
      " tenant TEXT NOT NULL, key TEXT NOT NULL, body_hash TEXT NOT NULL,"
      " session_id TEXT NOT NULL DEFAULT '', created_at INTEGER NOT NULL,"
      " PRIMARY KEY (tenant, key));"
      "CREATE TABLE IF NOT EXISTS previews ("
      " id TEXT PRIMARY KEY, session_id TEXT NOT NULL, port INTEGER NOT NULL,"
      " created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL);");
  if (!r) return r.error();
  // Databases of earlier versions lack the newer columns.
  for (auto [column, definition] : {std::pair{"token_generation", "INTEGER NOT NULL DEFAULT 0"},
                                    std::pair{"owner", "TEXT NOT NULL DEFAULT 'admin'"},
                                    std::pair{"idle_timeout_s", "INTEGER NOT NULL DEFAULT 0"},
                                    std::pair{"on_idle", "TEXT NOT NULL DEFAULT 'delete'"},
                                    std::pair{"handoff", "TEXT NOT NULL DEFAULT ''"}}) {
    if (Stmt(db, (std::string("SELECT ") + column + " FROM sessions LIMIT 0").c_str()).ok())
      continue;
    r = store->exec(
        (std::string("ALTER TABLE sessions ADD COLUMN ") + column + " " + definition + ";")
            .c_str());
    if (!r) return r.error();
  }
  return store;
}

SessionStore::~SessionStore() { sqlite3_close(db_); }

Result<void> SessionStore::exec(const char* sql) { return exec_sql(db_, sql); }

Result<void> SessionStore::insert(const SessionRecord& r) {
  Stmt s(db_, (std::string("INSERT INTO sessions (") + kColumns +
               ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)")
                  .c_str());
  if (!s.ok()) return db_error(db_, "prepare insert");
  s.bind(1, r.id).bind(2, r.driver).bind(3, std::string(to_string(r.status))).bind(4, r.end_reason);
  s.bind(5, int64_t{r.width}).bind(6, int64_t{r.height}).bind(7, r.start_url);
  s.bind(8, r.timeout_s).bind(9, r.created_at).bind(10, r.expires_at).bind(11, r.ended_at);
  s.bind(12, int64_t{r.token_generation}).bind(13, r.idle_timeout_s).bind(14, r.on_idle);
  s.bind(15, r.owner);
  if (s.step() != SQLITE_DONE) return db_error(db_, "insert");
  return {};
}

Result<void> SessionStore::set_status(const std::string& id, SessionStatus status,
                                      const std::string& end_reason, int64_t ended_at) {
  // An ended session's handoff (its secrets among it) is of no more use: drop it.
  Stmt s(db_,
         "UPDATE sessions SET status = ?2, end_reason = ?3, ended_at = ?4,"
         " handoff = CASE WHEN ?4 = 0 THEN handoff ELSE '' END WHERE id = ?1");
  if (!s.ok()) return db_error(db_, "prepare update");
  s.bind(1, id).bind(2, std::string(to_string(status))).bind(3, end_reason).bind(4, ended_at);
  if (s.step() != SQLITE_DONE) return db_error(db_, "update");
  return {};
}

Result<void> SessionStore::set_handoff(const std::string& id, const std::string& handoff) {
  Stmt s(db_, "UPDATE sessions SET handoff = ?2 WHERE id = ?1 AND ended_at = 0");
  if (!s.ok()) return db_error(db_, "prepare update");
  s.bind(1, id).bind(2, handoff);
  if (s.step() != SQLITE_DONE) return db_error(db_, "update");
  return {};
}

std::string SessionStore::handoff(const std::string& id) {
  Stmt s(db_, "SELECT handoff FROM sessions WHERE id = ?1");
  s.bind(1, id);
  return s.step() == SQLITE_ROW ? s.text(0) : std::string();
}

Result<void> SessionStore::set_token_generation(const std::string& id, uint32_t generation) {
  Stmt s(db_, "UPDATE sessions SET token_generation = ?2 WHERE id = ?1");
  if (!s.ok()) return db_error(db_, "prepare update");
  s.bind(1, id).bind(2, int64_t{generation});
  if (s.step() != SQLITE_DONE) return db_error(db_, "update");
  return {};
}

Result<void> SessionStore::set_timers(const std::string& id, int64_t timeout_s, int64_t expires_at,
                                      int64_t idle_timeout_s) {
  Stmt s(db_,
         "UPDATE sessions SET timeout_s = ?2, expires_at = ?3, idle_timeout_s = ?4 WHERE id = ?1");
  if (!s.ok()) return db_error(db_, "prepare update");
  s.bind(1, id).bind(2, timeout_s).bind(3, expires_at).bind(4, idle_timeout_s);
  if (s.step() != SQLITE_DONE) return db_error(db_, "update");
  return {};
}

Result<std::optional<SessionStore::IdempotentCreate>> SessionStore::claim_idempotency_key(
    const std::string& tenant, const std::string& key, const std::string& body_hash, int64_t now,
    int64_t keep_s) {
  {
    Stmt old(db_, "DELETE FROM idempotency WHERE created_at < ?1");
    old.bind(1, now - keep_s);
    if (old.step() != SQLITE_DONE) return db_error(db_, "expire idempotency keys");
  }
  Stmt claim(db_,
             "INSERT INTO idempotency (tenant, key, body_hash, created_at) VALUES (?1, ?2, ?3, ?4)"
             " ON CONFLICT (tenant, key) DO NOTHING");
  if (!claim.ok()) return db_error(db_, "prepare claim");
  claim.bind(1, tenant).bind(2, key).bind(3, body_hash).bind(4, now);
  if (claim.step() != SQLITE_DONE) return db_error(db_, "claim idempotency key");
  if (sqlite3_changes(db_) == 1) return std::optional<IdempotentCreate>{};
  Stmt got(db_, "SELECT body_hash, session_id FROM idempotency WHERE tenant = ?1 AND key = ?2");
  got.bind(1, tenant).bind(2, key);
  if (got.step() != SQLITE_ROW) return db_error(db_, "read idempotency key");
  return std::optional<IdempotentCreate>{IdempotentCreate{got.text(0), got.text(1)}};
}

Result<void> SessionStore::settle_idempotency_key(const std::string& tenant, const std::string& key,
                                                  const std::string& session_id) {
  Stmt s(db_, "UPDATE idempotency SET session_id = ?3 WHERE tenant = ?1 AND key = ?2");
  s.bind(1, tenant).bind(2, key).bind(3, session_id);
  if (s.step() != SQLITE_DONE) return db_error(db_, "settle idempotency key");
  return {};
}

Result<void> SessionStore::release_idempotency_key(const std::string& tenant,
                                                   const std::string& key) {
  Stmt s(db_, "DELETE FROM idempotency WHERE tenant = ?1 AND key = ?2");
  s.bind(1, tenant).bind(2, key);
  if (s.step() != SQLITE_DONE) return db_error(db_, "release idempotency key");
  return {};
}

std::optional<SessionRecord> SessionStore::get(const std::string& id) {
  Stmt s(db_, (std::string("SELECT ") + kColumns + " FROM sessions WHERE id = ?1").c_str());
  s.bind(1, id);
  if (s.step() != SQLITE_ROW) return std::nullopt;
  return read_row(s);
}

std::vector<SessionRecord> SessionStore::list(bool include_ended, int limit) {
  std::string sql = std::string("SELECT ") + kColumns + " FROM sessions" +
                    (include_ended ? "" : " WHERE ended_at = 0") +
                    " ORDER BY created_at DESC, id LIMIT ?1";
  Stmt s(db_, sql.c_str());
  s.bind(1, int64_t{limit});
  std::vector<SessionRecord> out;
  while (s.step() == SQLITE_ROW) out.push_back(read_row(s));
  return out;
}

std::vector<SessionRecord> SessionStore::list_of(const std::string& owner, bool include_ended,
                                                 int limit) {
  std::string sql = std::string("SELECT ") + kColumns + " FROM sessions WHERE owner = ?2" +
                    (include_ended ? "" : " AND ended_at = 0") +
                    " ORDER BY created_at DESC, id LIMIT ?1";
  Stmt s(db_, sql.c_str());
  s.bind(1, int64_t{limit}).bind(2, owner);
  std::vector<SessionRecord> out;
  while (s.step() == SQLITE_ROW) out.push_back(read_row(s));
  return out;
}

std::vector<std::string> SessionStore::end_unfinished(const std::string& reason, int64_t now) {
  std::vector<std::string> ids;
  {
    Stmt s(db_, "SELECT id FROM sessions WHERE ended_at = 0");
    while (s.step() == SQLITE_ROW) ids.push_back(s.text(0));
  }
  for (const auto& id : ids) (void)set_status(id, SessionStatus::kEnded, reason, now);
  return ids;
}

Result<void> SessionStore::save_preview(const PreviewRow& p) {
  Stmt s(db_,
         "INSERT OR REPLACE INTO previews (id, session_id, port, created_at, expires_at)"
         " VALUES (?1, ?2, ?3, ?4, ?5)");
  if (!s.ok()) return db_error(db_, "prepare insert");
  s.bind(1, p.id).bind(2, p.session_id).bind(3, int64_t{p.port}).bind(4, p.created_at);
  s.bind(5, p.expires_at);
  if (s.step() != SQLITE_DONE) return db_error(db_, "insert");
  return {};
}

Result<void> SessionStore::remove_preview(const std::string& id) {
  Stmt s(db_, "DELETE FROM previews WHERE id = ?1");
  if (!s.ok()) return db_error(db_, "prepare delete");
  s.bind(1, id);
  if (s.step() != SQLITE_DONE) return db_error(db_, "delete");
  return {};
}

std::vector<SessionStore::PreviewRow> SessionStore::previews() {
  Stmt s(db_, "SELECT id, session_id, port, created_at, expires_at FROM previews");
  std::vector<PreviewRow> out;
  while (s.step() == SQLITE_ROW) {
    out.push_back({s.text(0), s.text(1), static_cast<int>(s.integer(2)), s.integer(3),
                   s.integer(4)});
  }
  return out;
}

}  // namespace cabin::store
