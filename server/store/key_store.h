// KeyStore: tenant API keys, in the SQLite database beside the sessions: each key's id, name,
// quotas and the SHA-256 of its secret (never the secret itself), read into memory at start so
// that authenticating a request reads no disk.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "server/api/key_spec.h"

namespace cabin::store {

struct ApiKeyRecord {
  std::string id;  // api::valid_key_id
  std::string name;
  int max_sessions = 0;
  int max_creates_per_minute = 0;
  int64_t max_memory_mb = 0;
  int max_vcpus = 0;
  int64_t max_recordings_mb = 0;
  int max_profiles = 0;
  int64_t max_profiles_mb = 0;
  int64_t created_at = 0;  // unix seconds
  int64_t revoked_at = 0;  // 0 while it works
  bool from_file = false;  // kept in --tenant-keys-file, not minted here
};

// --tenant-keys-file: keys every node behind a gateway verifies alike, from one file (a
// Kubernetes Secret). {"keys": [{"id", "name", "secret_sha256", and the quotas of
// api::KeySpec}]}; the bearer value of each is "cabin_<id>.<secret>", the secret 64
// hex digits whose SHA-256 (hex) the file holds.
inline constexpr size_t kMaxTenantKeysFileBytes = 1 << 20;

class KeyStore {
 public:
  // Its own connection to `path` (the sessions' database file; WAL lets both write). ":memory:"
  // opens a private in-memory database (tests).
  static Result<std::unique_ptr<KeyStore>> open(const std::string& path);
  ~KeyStore();
  KeyStore(const KeyStore&) = delete;
  KeyStore& operator=(const KeyStore&) = delete;

  struct Minted {
    ApiKeyRecord record;
    std::string key;  // "cabin_<id>.<secret>": shown once, kept nowhere
  };
  // A new key: 256 random bits of secret, stored as their SHA-256.
  Result<Minted> mint(const api::KeySpec& spec, int64_t now);
  // Keys that work, oldest first.
  std::vector<ApiKeyRecord> list() const;
  // A key by id, revoked or not.
  std::optional<ApiKeyRecord> get(std::string_view id) const;
  // From now on the key is refused. Revoking a revoked key answers it as it is; kNotFound if
  // unknown.
  Result<ApiKeyRecord> revoke(const std::string& id, int64_t now);
  // The key a bearer value is, checked in constant time against its stored hash; 401
  // unauthenticated when it is not a key of this server, or revoked.
  Result<ApiKeyRecord> verify(std::string_view presented) const;
  // Whether a bearer value has the form of a tenant key (not whether it is one).
  static bool looks_like_key(std::string_view presented);
  // Replaces the keys of --tenant-keys-file with those of `text` (its contents), all or none;
  // `now` is when they count as made. Answers how many; a bad file changes nothing.
  Result<size_t> set_file_keys(std::string_view text, int64_t now);

 private:
  struct Entry {
    ApiKeyRecord record;
    std::string secret_hash;  // hex SHA-256 of the secret
    uint64_t seq = 0;         // the order of minting
  };
  explicit KeyStore(sqlite3* db) : db_(db) {}
  sqlite3* db_;
  const Entry* find(std::string_view id) const;
  std::map<std::string, Entry, std::less<>> keys_;
  std::map<std::string, Entry, std::less<>> file_keys_;
  uint64_t next_seq_ = 0;
};

}  // namespace cabin::store
