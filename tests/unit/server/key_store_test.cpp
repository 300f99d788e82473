// Tenant API keys: the body of POST /v1/keys, the key store (hashes only, constant-time checks,
// revocation, kept across a restart) and key ids at the edge.
#include "server/store/key_store.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/crypto.h"
#include "server/api/ids.h"
#include "server/api/key_spec.h"
#include "server/api/router.h"
#include "tests/fakes/temp_dir.h"

namespace {

using namespace cabin;
using store::KeyStore;

api::KeySpec spec(const std::string& body) {
  auto s = api::parse_key_spec(body);
  REQUIRE(s.ok());
  return *s;
}

TEST_CASE("a key spec takes a name and two quotas, with bounded defaults", "[keys]") {
  auto s = spec(R"({"name":"ci runner","max_sessions":3,"max_creates_per_minute":12})");
  CHECK(s.name == "ci runner");
  CHECK(s.max_sessions == 3);
  CHECK(s.max_creates_per_minute == 12);
  auto d = spec(R"({"name":"a"})");
  CHECK(d.max_sessions == api::kDefaultKeyMaxSessions);
  CHECK(d.max_creates_per_minute == api::kDefaultKeyCreatesPerMinute);
}

TEST_CASE("a key spec refuses what is not a plain name or a quota in range", "[keys]") {
  for (const char* bad : {
           R"({})",                                            // no name
           R"({"name":""})",                                   // empty
           R"({"name":" padded"})",                            // leading space
           R"({"name":"a\nb"})",                               // a control byte
           R"({"name":"ünïcode"})",                            // not plain ASCII
           R"({"name":"x","max_sessions":0})",                 // below the range
           R"({"name":"x","max_sessions":10001})",             // above it
           R"({"name":"x","max_creates_per_minute":-1})",      //
           R"({"name":"x","max_sessions":"3"})",               // a string
           R"({"name":"x","owner":"admin"})",                  // an unknown field
           R"([])", R"(not json)"}) {
    INFO(bad);
    auto r = api::parse_key_spec(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().errc == Errc::kInvalidArgument);
  }
  CHECK_FALSE(api::parse_key_spec(R"({"name":")" + std::string(65, 'a') + R"("})").ok());
  CHECK(api::parse_key_spec(R"({"name":")" + std::string(64, 'a') + R"("})").ok());
}

TEST_CASE("a key spec budgets memory, vCPUs, recordings and profiles, bounded by default",
          "[keys]") {
  auto s = spec(R"({"name":"r","max_memory_mb":4096,"max_vcpus":3,"max_recordings_mb":100,
                    "max_profiles":2,"max_profiles_mb":50})");
  CHECK(s.max_memory_mb == 4096);
  CHECK(s.max_vcpus == 3);
  CHECK(s.max_recordings_mb == 100);
  CHECK(s.max_profiles == 2);
  CHECK(s.max_profiles_mb == 50);
  auto d = spec(R"({"name":"a"})");
  CHECK(d.max_memory_mb == api::kDefaultKeyMaxMemoryMb);
  CHECK(d.max_vcpus == api::kDefaultKeyMaxVcpus);
  CHECK(d.max_recordings_mb == api::kDefaultKeyMaxRecordingsMb);
  CHECK(d.max_profiles == api::kDefaultKeyMaxProfiles);
  CHECK(d.max_profiles_mb == api::kDefaultKeyMaxProfilesMb);
  for (const char* bad :
       {R"({"name":"x","max_memory_mb":100})", R"({"name":"x","max_vcpus":0})",
        R"({"name":"x","max_vcpus":10001})", R"({"name":"x","max_memory_mb":"1024"})",
        R"({"name":"x","max_profiles":0})", R"({"name":"x","max_recordings_mb":0})",
        R"({"name":"x","max_profiles_mb":"1"})"}) {
    INFO(bad);
    CHECK_FALSE(api::parse_key_spec(bad).ok());
  }
}

TEST_CASE("budgets are kept across a restart, and keys made before them get the defaults",
          "[keys]") {
  testing::TempDir dir;
  const std::string db = (dir.path / "cabin.db").string();
  {
    // A table as it was before the budgets.
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(db.c_str(), &raw) == SQLITE_OK);
    REQUIRE(sqlite3_exec(raw,
                         "CREATE TABLE api_keys (id TEXT PRIMARY KEY, name TEXT NOT NULL,"
                         " secret_hash TEXT NOT NULL, max_sessions INTEGER NOT NULL,"
                         " max_creates_per_minute INTEGER NOT NULL, created_at INTEGER NOT NULL,"
                         " revoked_at INTEGER NOT NULL DEFAULT 0);"
                         "INSERT INTO api_keys VALUES ('key_aaaaaaaaaaaaaaaaaaaa', 'old', '00',"
                         " 2, 3, 1000, 0);",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(raw);
  }
  std::string id;
  {
    auto ks = std::move(KeyStore::open(db).value());
    auto old = ks->get("key_aaaaaaaaaaaaaaaaaaaa");
    REQUIRE(old);
    CHECK(old->max_sessions == 2);
    CHECK(old->max_memory_mb == api::kDefaultKeyMaxMemoryMb);
    CHECK(old->max_vcpus == api::kDefaultKeyMaxVcpus);
    CHECK(old->max_profiles == api::kDefaultKeyMaxProfiles);
    auto m = ks->mint(spec(R"({"name":"new","max_memory_mb":1024,"max_vcpus":3,)"
                           R"("max_profiles_mb":9})"),
                      2000);
    REQUIRE(m.ok());
    id = m->record.id;
  }
  auto ks = std::move(KeyStore::open(db).value());
  auto again = ks->get(id);
  REQUIRE(again);
  CHECK(again->max_memory_mb == 1024);
  CHECK(again->max_vcpus == 3);
  CHECK(again->max_profiles_mb == 9);
  CHECK(again->max_recordings_mb == api::kDefaultKeyMaxRecordingsMb);
}

TEST_CASE("key ids have a fixed alphabet and length, checked by the router", "[keys]") {
  const auto id = api::new_key_id();
  CHECK(api::valid_key_id(id));
  CHECK(id.size() == 24);
  CHECK_FALSE(api::valid_key_id("key_ABCDEFGHIJKLMNOPQRST"));
  CHECK_FALSE(api::valid_key_id("ses_0123456789abcdefghij"));
  CHECK_FALSE(api::valid_key_id(id + "0"));
  auto del = api::route("DELETE", "/v1/keys/" + id);
  REQUIRE(del.ok());
  CHECK(del->id == api::RouteId::kDeleteKey);
  CHECK(del->key_id == id);
  auto bad = api::route("DELETE", "/v1/keys/key_..%2f");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == "key_not_found");
  CHECK(api::route("POST", "/v1/keys")->id == api::RouteId::kCreateKey);
  CHECK(api::route("GET", "/v1/keys")->id == api::RouteId::kListKeys);
  CHECK(api::route("PUT", "/v1/keys").error().code == "method_not_allowed");
}

TEST_CASE("a minted key verifies, and a changed one, another's or a revoked one does not",
          "[keys]") {
  auto ks = std::move(KeyStore::open(":memory:").value());
  auto a = ks->mint(spec(R"({"name":"a","max_sessions":2})"), 1000);
  REQUIRE(a.ok());
  auto b = ks->mint(spec(R"({"name":"b"})"), 1001);
  REQUIRE(b.ok());
  CHECK(a->record.id != b->record.id);
  CHECK(KeyStore::looks_like_key(a->key));
  CHECK(a->key.starts_with("cabin_" + a->record.id + "."));

  auto ok = ks->verify(a->key);
  REQUIRE(ok.ok());
  CHECK(ok->id == a->record.id);
  CHECK(ok->max_sessions == 2);
  CHECK(ok->created_at == 1000);

  // The last hex digit changed: the id is right, the secret is not.
  std::string wrong = a->key;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  auto refused = ks->verify(wrong);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == "unauthenticated");
  // b's id with a's secret.
  std::string swapped = b->key.substr(0, b->key.find('.')) + a->key.substr(a->key.find('.'));
  CHECK_FALSE(ks->verify(swapped).ok());
  CHECK_FALSE(ks->verify("cabin_key_0123456789abcdefghij." + std::string(64, 'a')).ok());
  CHECK_FALSE(ks->verify("not a key").ok());
  CHECK_FALSE(KeyStore::looks_like_key(a->key + "0"));
  CHECK_FALSE(KeyStore::looks_like_key(a->key.substr(1)));

  auto r = ks->revoke(a->record.id, 2000);
  REQUIRE(r.ok());
  CHECK(r->revoked_at == 2000);
  auto after = ks->verify(a->key);
  REQUIRE_FALSE(after.ok());
  CHECK(after.error().message.find("revoked") != std::string::npos);
  CHECK(ks->verify(b->key).ok());
  // Revoking again answers the key as it is; an unknown id is 404.
  CHECK(ks->revoke(a->record.id, 3000)->revoked_at == 2000);
  auto unknown = ks->revoke(api::new_key_id(), 3000);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code == "key_not_found");

  auto listed = ks->list();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].id == b->record.id);
  CHECK(ks->get(a->record.id)->revoked_at == 2000);
}

TEST_CASE("keys are listed in the order they were minted, within a second too", "[keys]") {
  testing::TempDir dir;
  const std::string db = (dir.path / "cabin.db").string();
  std::vector<std::string> minted;
  {
    auto ks = std::move(KeyStore::open(db).value());
    for (int i = 0; i < 8; ++i) minted.push_back(ks->mint(spec(R"({"name":"k"})"), 1000)->record.id);
    std::vector<std::string> listed;
    for (const auto& k : ks->list()) listed.push_back(k.id);
    CHECK(listed == minted);
  }
  auto ks = std::move(KeyStore::open(db).value());
  std::vector<std::string> reopened;
  for (const auto& k : ks->list()) reopened.push_back(k.id);
  CHECK(reopened == minted);
}

TEST_CASE("keys are kept across a restart, as hashes: the secret is nowhere on disk", "[keys]") {
  testing::TempDir dir;
  const std::string db = (dir.path / "cabin.db").string();
  std::string key, id;
  {
    auto ks = std::move(KeyStore::open(db).value());
    auto m = ks->mint(spec(R"({"name":"kept","max_creates_per_minute":7})"), 1000);
    REQUIRE(m.ok());
    key = m->key;
    id = m->record.id;
    auto gone = ks->mint(spec(R"({"name":"gone"})"), 1001);
    REQUIRE(ks->revoke(gone->record.id, 1002).ok());
  }
  auto ks = std::move(KeyStore::open(db).value());
  auto v = ks->verify(key);
  REQUIRE(v.ok());
  CHECK(v->id == id);
  CHECK(v->name == "kept");
  CHECK(v->max_creates_per_minute == 7);
  REQUIRE(ks->list().size() == 1);

  const std::string secret = key.substr(key.find('.') + 1);
  for (const auto& f : std::filesystem::directory_iterator(dir.path)) {
    std::ifstream in(f.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    INFO(f.path());
    CHECK(bytes.str().find(secret) == std::string::npos);
  }
}

}  // namespace

TEST_CASE("keys of a shared file verify as minted ones, all or none of a file", "[keys]") {
  auto opened = KeyStore::open(":memory:");
  REQUIRE(opened.ok());
  auto& ks = **opened;
  const std::string secret(64, 'a');
  const std::string id = "key_0123456789abcdefghij";
  const std::string hash = sha256_hex(secret);
  const std::string file = R"({"keys": [{"id": ")" + id + R"(", "name": "team", "secret_sha256": ")" +
                           hash + R"(", "max_sessions": 7}]})";
  auto n = ks.set_file_keys(file, 1000);
  REQUIRE(n.ok());
  CHECK(*n == 1);
  auto k = ks.verify("cabin_" + id + "." + secret);
  REQUIRE(k.ok());
  CHECK(k->max_sessions == 7);
  CHECK(k->max_creates_per_minute == api::kDefaultKeyCreatesPerMinute);
  CHECK(k->from_file);
  CHECK_FALSE(ks.verify("cabin_" + id + "." + std::string(64, 'b')).ok());
  CHECK(ks.list().size() == 1);
  auto revoked = ks.revoke(id, 2000);
  REQUIRE_FALSE(revoked.ok());
  CHECK(revoked.error().code == "key_in_file");
  // Read again: the same key keeps when it was first seen.
  REQUIRE(ks.set_file_keys(file, 5000).ok());
  CHECK(ks.get(id)->created_at == 1000);

  for (const std::string& bad : std::vector<std::string>{
           std::string("[]"), std::string(R"({"keys": {}})"), std::string(R"({"keys": [], "x": 1})"),
           R"({"keys": [{"id": "key_short", "name": "t", "secret_sha256": ")" + hash + R"("}]})",
           R"({"keys": [{"id": ")" + id + R"(", "name": "t", "secret_sha256": "ABC"}]})",
           R"({"keys": [{"id": ")" + id + R"(", "name": "t", "secret_sha256": ")" + hash +
               R"(", "owner": "x"}]})",
           R"({"keys": [{"id": ")" + id + R"(", "name": "t", "secret_sha256": ")" + hash +
               R"(", "max_sessions": 0}]})",
           R"({"keys": [{"id": ")" + id + R"(", "name": "t", "secret_sha256": ")" + hash +
               R"("}, {"id": ")" + id + R"(", "name": "u", "secret_sha256": ")" + hash + R"("}]})",
           std::string(R"({"keys": [[[[[[]]]]]]})")}) {
    INFO(bad);
    CHECK_FALSE(ks.set_file_keys(bad, 3000).ok());
  }
  // A bad file changed nothing.
  CHECK(ks.verify("cabin_" + id + "." + secret).ok());
  // An empty one removes them.
  REQUIRE(ks.set_file_keys(R"({"keys": []})", 3000).ok());
  CHECK_FALSE(ks.verify("cabin_" + id + "." + secret).ok());
}
