// ProfileStore: profiles are their owner's, used by one session at a time, and kept sealed at
// rest: what a session leaves comes back to the next that checks the profile out, and the disk
// never shows it in the clear.
#include "server/profiles/profile_store.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/crypto.h"

#include "tests/fakes/temp_dir.h"

namespace fs = std::filesystem;
using namespace cabin::profiles;

namespace {

using cabin::testing::TempDir;



std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("a profile is its owner's, and the admin sees them all", "[profiles]") {
  TempDir state;
  auto s = ProfileStore::open(":memory:", state.path / "profiles", cabin::random_bytes(32));
  REQUIRE(s.ok());
  auto& store = **s;
  auto a = store.create("key_a", "shop login", 100);
  REQUIRE(a.ok());
  CHECK(a->id.starts_with("prf_"));
  CHECK(a->in_use_by.empty());
  auto b = store.create("key_b", "other", 101);
  REQUIRE(b.ok());
  CHECK(store.get(a->id, "key_a").ok());
  auto hidden = store.get(a->id, "key_b");
  REQUIRE_FALSE(hidden.ok());
  CHECK(hidden.error().code == "profile_not_found");
  CHECK(store.list("key_a").size() == 1);
  CHECK(store.list("admin").size() == 2);
  CHECK_FALSE(store.remove(a->id, "key_b").ok());
  for (const std::string& bad : {std::string(), std::string(200, 'n'), std::string("a\nb")}) {
    auto r = store.create("key_a", bad, 102);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == "invalid_request");
  }
}

TEST_CASE("one session at a time, and what it saves comes back sealed", "[profiles]") {
  TempDir state, first, second, third;
  const std::string key = cabin::random_bytes(32);
  const fs::path db = state.path / "cabin.db";
  auto s = ProfileStore::open(db.string(), state.path / "profiles", key);
  REQUIRE(s.ok());
  auto& store = **s;
  auto p = store.create("admin", "p", 100);
  REQUIRE(p.ok());

  auto out = store.check_out(p->id, "admin", "ses_one", first.path);
  REQUIRE(out.ok());
  CHECK(fs::is_empty(first.path));  // never saved: empty
  auto busy = store.check_out(p->id, "admin", "ses_two", second.path);
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.error().code == "profile_in_use");
  CHECK(busy.error().errc == cabin::Errc::kConflict);
  CHECK(store.remove(p->id, "admin").error().code == "profile_in_use");

  fs::create_directories(first.path / "Default");
  std::ofstream(first.path / "Default" / "Cookies") << "who=kept-cookie-value";
  REQUIRE(store.check_in(p->id, "ses_one", &first.path, 200).ok());
  auto saved = store.get(p->id, "admin");
  REQUIRE(saved.ok());
  CHECK(saved->in_use_by.empty());
  CHECK(saved->saved_at == 200);
  CHECK(saved->size_bytes > 0);
  // At rest: sealed, nothing of the cookie in the clear.
  const std::string at_rest = read_all(state.path / "profiles" / (p->id + ".sealed"));
  REQUIRE_FALSE(at_rest.empty());
  CHECK(at_rest.find("kept-cookie-value") == std::string::npos);

  // A later cabind with the same key finds it and hands it on.
  s->reset();
  auto again = ProfileStore::open(db.string(), state.path / "profiles", key);
  REQUIRE(again.ok());
  REQUIRE((*again)->check_out(p->id, "admin", "ses_two", second.path).ok());
  CHECK(read_all(second.path / "Default" / "Cookies") == "who=kept-cookie-value");
  // Given back without saving: it keeps what it had.
  REQUIRE((*again)->check_in(p->id, "ses_two", nullptr, 300).ok());
  CHECK((*again)->get(p->id, "admin")->saved_at == 200);

  // Another key opens nothing.
  auto other = ProfileStore::open(db.string(), state.path / "profiles", cabin::random_bytes(32));
  REQUIRE(other.ok());
  auto refused = (*other)->check_out(p->id, "admin", "ses_three", third.path);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == "profile_corrupt");
  CHECK((*other)->get(p->id, "admin")->in_use_by.empty());
}

TEST_CASE("an archive opens in its own profile's place only, and an unbound one is bound at start",
          "[profiles]") {
  TempDir state, into;
  const std::string key = cabin::random_bytes(32);
  const fs::path db = state.path / "cabin.db";
  const fs::path dir = state.path / "profiles";
  auto s = ProfileStore::open(db.string(), dir, key);
  REQUIRE(s.ok());
  auto a = (*s)->create("tenant_a", "a", 100);
  auto b = (*s)->create("tenant_b", "b", 100);
  REQUIRE((a.ok() && b.ok()));
  for (const auto& [p, cookie] : {std::pair{*a, "a-cookie"}, std::pair{*b, "b-cookie"}}) {
    TempDir tree;
    REQUIRE((*s)->check_out(p.id, p.owner, "ses_" + p.id, tree.path).ok());
    fs::create_directories(tree.path / "Default");
    std::ofstream(tree.path / "Default" / "Cookies") << cookie;
    REQUIRE((*s)->check_in(p.id, "ses_" + p.id, &tree.path, 200).ok());
  }
  // A's archive copied over B's (write access to the state dir): B's session does not get A's.
  fs::copy_file(dir / (a->id + ".sealed"), dir / (b->id + ".sealed"),
                fs::copy_options::overwrite_existing);
  auto swapped = (*s)->check_out(b->id, "tenant_b", "ses_b2", into.path);
  REQUIRE_FALSE(swapped.ok());
  CHECK(swapped.error().code == "profile_corrupt");

  // An archive sealed before archives were bound to their id is bound when the store opens.
  TempDir tree;
  fs::create_directories(tree.path / "Default");
  std::ofstream(tree.path / "Default" / "Cookies") << "old-cookie";
  auto packed = cabin::profiles::pack(tree.path);
  REQUIRE(packed.ok());
  {
    std::ofstream(dir / (a->id + ".sealed"), std::ios::binary | std::ios::trunc)
        << *cabin::seal(key, *packed);
  }
  s->reset();
  auto again = ProfileStore::open(db.string(), dir, key);
  REQUIRE(again.ok());
  CHECK_FALSE(cabin::open_sealed(key, read_all(dir / (a->id + ".sealed"))));
  TempDir back;
  REQUIRE((*again)->check_out(a->id, "tenant_a", "ses_a2", back.path).ok());
  CHECK(read_all(back.path / "Default" / "Cookies") == "old-cookie");
}

TEST_CASE("a saved tree over the limits is refused and the profile keeps what it had",
          "[profiles]") {
  TempDir state, tree;
  ArchiveLimits small;
  small.max_bytes = 16;
  auto s = ProfileStore::open(":memory:", state.path / "profiles", cabin::random_bytes(32), small);
  REQUIRE(s.ok());
  auto p = (*s)->create("admin", "p", 1);
  REQUIRE((*s)->check_out(p->id, "admin", "ses_one", tree.path).ok());
  std::ofstream(tree.path / "big") << std::string(100, 'x');
  auto r = (*s)->check_in(p->id, "ses_one", &tree.path, 2);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == "profile_too_large");
  auto after = (*s)->get(p->id, "admin");
  CHECK(after->in_use_by.empty());  // free again
  CHECK(after->saved_at == 0);
  CHECK_FALSE(fs::exists(state.path / "profiles" / (p->id + ".sealed")));
}

TEST_CASE("an owner's profiles are held to its count and bytes, on create and on save",
          "[profiles]") {
  TempDir state, one, two, three;
  auto s = ProfileStore::open(":memory:", state.path / "profiles", cabin::random_bytes(32));
  REQUIRE(s.ok());
  auto& store = **s;
  ProfileBudget budget{2, 2000};
  store.use_budgets(
      [&](const std::string& owner) { return owner == "key_a" ? budget : ProfileBudget{}; });
  auto p1 = store.create("key_a", "one", 1);
  auto p2 = store.create("key_a", "two", 1);
  REQUIRE(p1.ok());
  REQUIRE(p2.ok());
  auto third = store.create("key_a", "three", 1);
  REQUIRE_FALSE(third.ok());
  CHECK(third.error().code == "quota_profiles");
  CHECK(third.error().errc == cabin::Errc::kTooManyRequests);
  CHECK_THAT(third.error().message, Catch::Contains("max_profiles"));
  CHECK(store.create("key_b", "other", 1).ok());  // another owner's budget is its own
  CHECK(store.create("admin", "mine", 1).ok());

  // A save that would take the owner past its bytes keeps what the profile had.
  REQUIRE(store.check_out(p1->id, "key_a", "ses_one", one.path).ok());
  std::ofstream(one.path / "a") << std::string(1200, 'a');
  REQUIRE(store.check_in(p1->id, "ses_one", &one.path, 2).ok());
  const uint64_t first = store.get(p1->id, "key_a")->size_bytes;
  REQUIRE(first > 1200);
  REQUIRE(first < 2000);
  REQUIRE(store.check_out(p2->id, "key_a", "ses_two", two.path).ok());
  std::ofstream(two.path / "b") << std::string(1200, 'b');
  auto over = store.check_in(p2->id, "ses_two", &two.path, 3);
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == "quota_profiles");
  CHECK_THAT(over.error().message, Catch::Contains("max_profiles_mb"));
  CHECK(store.get(p2->id, "key_a")->saved_at == 0);
  CHECK(store.get(p2->id, "key_a")->in_use_by.empty());
  // Saving the same profile again counts its new size, not its old one besides.
  REQUIRE(store.check_out(p1->id, "key_a", "ses_three", three.path).ok());
  REQUIRE(store.check_in(p1->id, "ses_three", &three.path, 4).ok());

  // Its bytes at the budget: no new profile, whatever the count.
  budget = {10, first};
  auto full = store.create("key_a", "four", 5);
  REQUIRE_FALSE(full.ok());
  CHECK(full.error().code == "quota_profiles");
  CHECK_THAT(full.error().message, Catch::Contains("max_profiles_mb"));
}

TEST_CASE("profiles of sessions that did not come back are free again", "[profiles]") {
  TempDir state, a, b;
  auto s = ProfileStore::open(":memory:", state.path / "profiles", cabin::random_bytes(32));
  REQUIRE(s.ok());
  auto& store = **s;
  auto kept = store.create("admin", "kept", 1);
  auto lost = store.create("admin", "lost", 1);
  auto idle = store.create("admin", "idle", 1);
  REQUIRE(store.check_out(kept->id, "admin", "ses_alive", a.path).ok());
  REQUIRE(store.check_out(lost->id, "admin", "ses_gone", b.path).ok());
  auto freed = store.release_unless({"ses_alive"});
  CHECK(freed == std::vector<std::string>{lost->id});
  CHECK(store.get(kept->id, "admin")->in_use_by == "ses_alive");
  CHECK(store.get(lost->id, "admin")->in_use_by.empty());
  CHECK(store.get(idle->id, "admin")->in_use_by.empty());
}

TEST_CASE("Chromium's caches stay out of a saved profile", "[profiles]") {
  TempDir state, from, into;
  auto s = ProfileStore::open(":memory:", state.path / "profiles", cabin::random_bytes(32));
  REQUIRE(s.ok());
  auto& store = **s;
  auto p = store.create("admin", "p", 1);
  REQUIRE(store.check_out(p->id, "admin", "ses_one", from.path).ok());
  fs::create_directories(from.path / "Default" / "Cache" / "Cache_Data");
  fs::create_directories(from.path / "Default" / "Code Cache" / "js");
  fs::create_directories(from.path / "GrShaderCache");
  std::ofstream(from.path / "Default" / "Cache" / "Cache_Data" / "data_0") << "cached";
  std::ofstream(from.path / "Default" / "Code Cache" / "js" / "index") << "compiled";
  std::ofstream(from.path / "GrShaderCache" / "data_1") << "shader";
  std::ofstream(from.path / "Default" / "Cookies") << "kept";
  REQUIRE(store.check_in(p->id, "ses_one", &from.path, 2).ok());
  REQUIRE(store.check_out(p->id, "admin", "ses_two", into.path).ok());
  CHECK(read_all(into.path / "Default" / "Cookies") == "kept");
  CHECK_FALSE(fs::exists(into.path / "Default" / "Cache"));
  CHECK_FALSE(fs::exists(into.path / "Default" / "Code Cache"));
  CHECK_FALSE(fs::exists(into.path / "GrShaderCache"));
}
