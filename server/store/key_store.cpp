#include "server/store/key_store.h"

#include <algorithm>

#include "common/crypto.h"
#include "server/api/errors.h"
#include "server/api/ids.h"
#include "server/store/sqlite_stmt.h"

namespace cabin::store {
namespace {

constexpr std::string_view kKeyPrefix = "cabin_";
constexpr size_t kSecretHexChars = 64;  // 256 bits

bool lower_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<KeyStore>> KeyStore::open(const std::string& path) {
  auto opened = open_database(path);
  if (!opened) return opened.error();
  sqlite3* db = *opened;
  std::unique_ptr<KeyStore> store(new KeyStore(db));
  // The other connection may be writing: wait for it rather than fail.
  sqlite3_busy_timeout(db, 2000);
  CABIN_TRY(exec_sql(db,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                     "CREATE TABLE IF NOT EXISTS api_keys ("
                     " id TEXT PRIMARY KEY, name TEXT NOT NULL, secret_hash TEXT NOT NULL,"
                     " max_sessions INTEGER NOT NULL, max_creates_per_minute INTEGER NOT NULL,"
                     " created_at INTEGER NOT NULL, revoked_at INTEGER NOT NULL DEFAULT 0);"));
  Stmt s(db,
         "SELECT id, name, secret_hash, max_sessions, max_creates_per_minute, created_at,"
         " revoked_at FROM api_keys ORDER BY rowid");
  if (!s.ok()) return db_error(db, "prepare read keys");
  while (s.step() == SQLITE_ROW) {
    Entry e;
    e.record.id = s.text(0);
    e.record.name = s.text(1);
    e.secret_hash = s.text(2);
    e.record.max_sessions = static_cast<int>(s.integer(3));
    e.record.max_creates_per_minute = static_cast<int>(s.integer(4));
    e.record.created_at = s.integer(5);
    e.record.revoked_at = s.integer(6);
    e.seq = store->next_seq_++;
    store->keys_.emplace(e.record.id, std::move(e));
  }
  return store;
}

KeyStore::~KeyStore() { sqlite3_close(db_); }

Result<KeyStore::Minted> KeyStore::mint(const api::KeySpec& spec, int64_t now) {
  Entry e;
  e.record.id = api::new_key_id();
  e.record.name = spec.name;
  e.record.max_sessions = spec.max_sessions;
  e.record.max_creates_per_minute = spec.max_creates_per_minute;
  e.record.created_at = now;
  const std::string secret = random_hex(kSecretHexChars / 2);
  e.secret_hash = sha256_hex(secret);
  e.seq = next_seq_;
  Stmt s(db_,
         "INSERT INTO api_keys (id, name, secret_hash, max_sessions, max_creates_per_minute,"
         " created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!s.ok()) return db_error(db_, "prepare insert key");
  s.bind(1, e.record.id).bind(2, e.record.name).bind(3, e.secret_hash);
  s.bind(4, int64_t{e.record.max_sessions}).bind(5, int64_t{e.record.max_creates_per_minute});
  s.bind(6, now);
  if (s.step() != SQLITE_DONE) return db_error(db_, "insert key");
  Minted out{e.record, std::string(kKeyPrefix) + e.record.id + "." + secret};
  ++next_seq_;
  keys_.emplace(e.record.id, std::move(e));
  return out;
}

std::vector<ApiKeyRecord> KeyStore::list() const {
  std::vector<const Entry*> live;
  for (const auto& [_, e] : keys_) {
    if (e.record.revoked_at == 0) live.push_back(&e);
  }
  // In the order they were minted (several may share a second).
  std::sort(live.begin(), live.end(), [](const Entry* a, const Entry* b) { return a->seq < b->seq; });
  std::vector<ApiKeyRecord> out;
  for (const Entry* e : live) out.push_back(e->record);
  return out;
}

std::optional<ApiKeyRecord> KeyStore::get(std::string_view id) const {
  auto it = keys_.find(id);
  if (it == keys_.end()) return std::nullopt;
  return it->second.record;
}

Result<ApiKeyRecord> KeyStore::revoke(const std::string& id, int64_t now) {
  auto it = keys_.find(id);
  if (it == keys_.end()) return api::errors::key_not_found();
  if (it->second.record.revoked_at != 0) return it->second.record;
  Stmt s(db_, "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1");
  if (!s.ok()) return db_error(db_, "prepare revoke key");
  s.bind(1, id).bind(2, now);
  if (s.step() != SQLITE_DONE) return db_error(db_, "revoke key");
  it->second.record.revoked_at = now;
  return it->second.record;
}

bool KeyStore::looks_like_key(std::string_view presented) {
  const size_t id_len = api::kKeyIdPrefix.size() + api::kSessionIdRandomChars;
  if (presented.size() != kKeyPrefix.size() + id_len + 1 + kSecretHexChars) return false;
  if (presented.substr(0, kKeyPrefix.size()) != kKeyPrefix) return false;
  presented.remove_prefix(kKeyPrefix.size());
  return api::valid_key_id(presented.substr(0, id_len)) && presented[id_len] == '.' &&
         lower_hex(presented.substr(id_len + 1));
}

Result<ApiKeyRecord> KeyStore::verify(std::string_view presented) const {
  if (!looks_like_key(presented)) return api::errors::unauthenticated("the API key is not valid");
  presented.remove_prefix(kKeyPrefix.size());
  const size_t id_len = api::kKeyIdPrefix.size() + api::kSessionIdRandomChars;
  auto it = keys_.find(presented.substr(0, id_len));
  // The id is no secret; the secret's hash is compared in constant time.
  if (it == keys_.end() ||
      !constant_time_equal(sha256_hex(presented.substr(id_len + 1)), it->second.secret_hash)) {
    return api::errors::unauthenticated("the API key is not valid");
  }
  if (it->second.record.revoked_at != 0) {
    return api::errors::unauthenticated("this API key has been revoked");
  }
  return it->second.record;
}

}  // namespace cabin::store
