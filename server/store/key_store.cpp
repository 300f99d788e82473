#include "server/store/key_store.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/crypto.h"
#include "server/api/errors.h"
#include "server/api/ids.h"
#include "server/api/key_spec.h"
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

// The quotas added after the table's first form, with what keys made before them get.
constexpr std::pair<const char*, int64_t> kLaterQuotas[] = {
    {"max_memory_mb", api::kDefaultKeyMaxMemoryMb},
    {"max_vcpus", api::kDefaultKeyMaxVcpus},
    {"max_recordings_mb", api::kDefaultKeyMaxRecordingsMb},
    {"max_profiles", api::kDefaultKeyMaxProfiles},
    {"max_profiles_mb", api::kDefaultKeyMaxProfilesMb},
};

void set_quotas(ApiKeyRecord& r, const api::KeySpec& spec) {
  r.max_sessions = spec.max_sessions;
  r.max_creates_per_minute = spec.max_creates_per_minute;
  r.max_memory_mb = spec.max_memory_mb;
  r.max_vcpus = spec.max_vcpus;
  r.max_recordings_mb = spec.max_recordings_mb;
  r.max_profiles = spec.max_profiles;
  r.max_profiles_mb = spec.max_profiles_mb;
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
  for (const auto& [column, value] : kLaterQuotas) {
    if (Stmt(db, (std::string("SELECT ") + column + " FROM api_keys LIMIT 0").c_str()).ok())
      continue;
    CABIN_TRY(exec_sql(db, (std::string("ALTER TABLE api_keys ADD COLUMN ") + column +
                            " INTEGER NOT NULL DEFAULT " + std::to_string(value) + ";")
                               .c_str()));
  }
  Stmt s(db,
         "SELECT id, name, secret_hash, max_sessions, max_creates_per_minute, created_at,"
         " revoked_at, max_memory_mb, max_vcpus, max_recordings_mb, max_profiles,"
         " max_profiles_mb FROM api_keys ORDER BY rowid");
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
    e.record.max_memory_mb = s.integer(7);
    e.record.max_vcpus = static_cast<int>(s.integer(8));
    e.record.max_recordings_mb = s.integer(9);
    e.record.max_profiles = static_cast<int>(s.integer(10));
    e.record.max_profiles_mb = s.integer(11);
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
  set_quotas(e.record, spec);
  e.record.created_at = now;
  const std::string secret = random_hex(kSecretHexChars / 2);
  e.secret_hash = sha256_hex(secret);
  e.seq = next_seq_;
  Stmt s(db_,
         "INSERT INTO api_keys (id, name, secret_hash, max_sessions, max_creates_per_minute,"
         " created_at, max_memory_mb, max_vcpus, max_recordings_mb, max_profiles,"
         " max_profiles_mb) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
  if (!s.ok()) return db_error(db_, "prepare insert key");
  s.bind(1, e.record.id).bind(2, e.record.name).bind(3, e.secret_hash);
  s.bind(4, int64_t{e.record.max_sessions}).bind(5, int64_t{e.record.max_creates_per_minute});
  s.bind(6, now).bind(7, e.record.max_memory_mb).bind(8, int64_t{e.record.max_vcpus});
  s.bind(9, e.record.max_recordings_mb).bind(10, int64_t{e.record.max_profiles});
  s.bind(11, e.record.max_profiles_mb);
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
  for (const auto& [_, e] : file_keys_) live.push_back(&e);
  // In the order they were minted (several may share a second).
  std::sort(live.begin(), live.end(), [](const Entry* a, const Entry* b) { return a->seq < b->seq; });
  std::vector<ApiKeyRecord> out;
  for (const Entry* e : live) out.push_back(e->record);
  return out;
}

const KeyStore::Entry* KeyStore::find(std::string_view id) const {
  if (auto it = keys_.find(id); it != keys_.end()) return &it->second;
  if (auto it = file_keys_.find(id); it != file_keys_.end()) return &it->second;
  return nullptr;
}

std::optional<ApiKeyRecord> KeyStore::get(std::string_view id) const {
  const Entry* e = find(id);
  if (!e) return std::nullopt;
  return e->record;
}

Result<ApiKeyRecord> KeyStore::revoke(const std::string& id, int64_t now) {
  if (file_keys_.contains(id)) {
    return make_error(Errc::kConflict, "key_in_file",
                      "this key is kept in --tenant-keys-file: remove it there");
  }
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
  const Entry* e = find(presented.substr(0, id_len));
  // The id is no secret; the secret's hash is compared in constant time.
  if (!e || !constant_time_equal(sha256_hex(presented.substr(id_len + 1)), e->secret_hash)) {
    return api::errors::unauthenticated("the API key is not valid");
  }
  if (e->record.revoked_at != 0) {
    return api::errors::unauthenticated("this API key has been revoked");
  }
  return e->record;
}

Result<size_t> KeyStore::set_file_keys(std::string_view text, int64_t now) {
  auto bad = [](std::string why) {
    return make_error(Errc::kInvalidArgument, "bad_key_file", "--tenant-keys-file: " + why);
  };
  if (text.size() > kMaxTenantKeysFileBytes) return bad("larger than 1 MiB");
  auto doc = parse_bounded(text, JsonLimits{kMaxTenantKeysFileBytes, 4});
  if (!doc) return bad(doc.error().message);
  if (!doc->is_object() || doc->size() != 1 || !doc->contains("keys") ||
      !(*doc)["keys"].is_array()) {
    return bad("expected {\"keys\": [...]}");
  }
  std::map<std::string, Entry, std::less<>> fresh;
  uint64_t seq = next_seq_;
  for (const auto& k : (*doc)["keys"]) {
    if (!k.is_object()) return bad("each key is an object");
    nlohmann::json spec = nlohmann::json::object();
    std::string id, hash;
    for (const auto& [name, value] : k.items()) {
      if (name == "id" && value.is_string()) {
        id = value.get<std::string>();
      } else if (name == "secret_sha256" && value.is_string()) {
        hash = value.get<std::string>();
      } else if (name == "name" || name.starts_with("max_")) {
        spec[name] = value;  // parse_key_spec refuses what is not a quota
      } else {
        return bad("unknown or malformed field \"" + name + "\"");
      }
    }
    if (!api::valid_key_id(id)) return bad("\"id\" must be key_ and 20 of [a-z0-9]");
    if (hash.size() != kSecretHexChars || !lower_hex(hash))
      return bad(id + ": \"secret_sha256\" must be 64 lower-case hex digits");
    if (keys_.contains(id) || fresh.contains(id)) return bad(id + " is there twice");
    auto parsed = api::parse_key_spec(spec.dump());
    if (!parsed) return bad(id + ": " + parsed.error().message);
    Entry e;
    e.record.id = id;
    e.record.name = parsed->name;
    set_quotas(e.record, *parsed);
    e.record.created_at = now;
    e.record.from_file = true;
    if (auto old = file_keys_.find(id); old != file_keys_.end())
      e.record.created_at = old->second.record.created_at;
    e.secret_hash = hash;
    e.seq = seq++;
    fresh.emplace(id, std::move(e));
  }
  next_seq_ = seq;
  file_keys_ = std::move(fresh);
  return file_keys_.size();
}

}  // namespace cabin::store
