#include <catch2/catch.hpp>

#include <filesystem>
#include <string_view>
#include <vector>

#include "common/crypto.h"
#include "server/auth/api_key.h"
#include "server/auth/tokens.h"
#include "tests/fakes/fake_clock.h"

using namespace cabin;
using cabin::auth::TokenService;

namespace {
const std::string kSid = "ses_aaaaaaaaaaaaaaaaaaaa";
const std::string kOther = "ses_bbbbbbbbbbbbbbbbbbbb";
std::map<std::string, std::string> one_key() { return {{"k1", std::string(64, 'a')}}; }
}  // namespace

TEST_CASE("tokens verify until the expiry instant and not at it") {
  testing::FakeClock clock(1000);
  TokenService svc(one_key(), clock);
  auto t = svc.issue(kSid, "cdp", 1060, 0);
  CHECK(svc.verify(t, kSid, "cdp"));
  clock.set(1059);
  CHECK(svc.verify(t, kSid, "cdp"));
  clock.set(1060);
  auto expired = svc.verify(t, kSid, "cdp");
  REQUIRE_FALSE(expired);
  CHECK(expired.error().code == "token_expired");
  CHECK(expired.error().errc == Errc::kUnauthenticated);
}

TEST_CASE("tokens are bound to session and scope") {
  testing::FakeClock clock(1000);
  TokenService svc(one_key(), clock);
  auto t = svc.issue(kSid, "cdp", 2000, 7);
  auto claims = svc.verify(t, kSid, "cdp");
  REQUIRE(claims);
  CHECK(claims->generation == 7);
  CHECK(claims->key_id == "k1");
  CHECK_FALSE(svc.verify(t, kOther, "cdp"));
  CHECK_FALSE(svc.verify(t, kSid, "view"));
  CHECK(t.size() < auth::kMaxTokenLength);
  CHECK(t.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.") ==
        std::string::npos);
}

TEST_CASE("the live view accepts view and control tokens, and nothing else") {
  testing::FakeClock clock(1000);
  TokenService svc(one_key(), clock);
  const std::vector<std::string_view> live{"view", "control"};
  for (const char* scope : {"view", "control"}) {
    auto claims = svc.verify_any(svc.issue(kSid, scope, 2000, 0), kSid, live);
    REQUIRE(claims);
    CHECK(claims->scope == scope);
  }
  auto cdp = svc.verify_any(svc.issue(kSid, "cdp", 2000, 0), kSid, live);
  REQUIRE_FALSE(cdp);
  CHECK(cdp.error().code == "token_scope");
  CHECK(cdp.error().message == "token scope cdp does not allow this; it needs view or control");
  CHECK_FALSE(svc.verify_any(svc.issue(kOther, "control", 2000, 0), kSid, live));
  clock.set(2000);
  auto expired = svc.verify_any(svc.issue(kSid, "control", 2000, 0), kSid, live);
  REQUIRE_FALSE(expired);
  CHECK(expired.error().code == "token_expired");
}

TEST_CASE("tampered, truncated and foreign tokens are refused") {
  testing::FakeClock clock(1000);
  TokenService svc(one_key(), clock);
  auto t = svc.issue(kSid, "cdp", 2000, 0);
  std::string flipped = t;
  flipped.back() = flipped.back() == 'A' ? 'B' : 'A';
  CHECK_FALSE(svc.verify(flipped, kSid, "cdp"));
  CHECK_FALSE(svc.verify(t.substr(0, t.size() - 2), kSid, "cdp"));
  CHECK_FALSE(svc.verify("", kSid, "cdp"));
  CHECK_FALSE(svc.verify(std::string(5000, 'a'), kSid, "cdp"));
  CHECK_FALSE(svc.verify("abc.def", kSid, "cdp"));
  // Payload of one token with the signature of another.
  auto other = svc.issue(kSid, "cdp", 3000, 0);
  CHECK_FALSE(svc.verify(t.substr(0, t.find('.')) + other.substr(other.find('.')), kSid, "cdp"));
  // Same payload signed by a different key.
  TokenService stranger({{"k1", std::string(64, 'b')}}, clock);
  CHECK_FALSE(svc.verify(stranger.issue(kSid, "cdp", 2000, 0), kSid, "cdp"));
  // A payload re-encoded with a longer expiry keeps the old signature: refused.
  auto payload = base64url_decode(t.substr(0, t.find('.')));
  REQUIRE(payload);
  std::string forged = *payload;
  forged.replace(forged.find("2000"), 4, "9999");
  CHECK_FALSE(svc.verify(base64url_encode(forged) + t.substr(t.find('.')), kSid, "cdp"));
}

TEST_CASE("rotated keys: the newest signs, old ones still verify until removed") {
  testing::FakeClock clock(1000);
  TokenService old_svc({{"k1", std::string(64, 'a')}}, clock);
  auto old_token = old_svc.issue(kSid, "cdp", 2000, 0);
  TokenService rotated({{"k1", std::string(64, 'a')}, {"k2", std::string(64, 'c')}}, clock);
  CHECK(rotated.verify(old_token, kSid, "cdp"));
  auto claims = rotated.decode(rotated.issue(kSid, "cdp", 2000, 0));
  REQUIRE(claims);
  CHECK(claims->key_id == "k2");
  TokenService removed({{"k2", std::string(64, 'c')}}, clock);
  CHECK_FALSE(removed.verify(old_token, kSid, "cdp"));
}

TEST_CASE("scopes: cdp, view, control and preview:<port> in canonical form") {
  CHECK(auth::parse_scope("cdp") == 0);
  CHECK(auth::parse_scope("view") == 0);
  CHECK(auth::parse_scope("control") == 0);
  CHECK(auth::parse_scope("preview:1") == 1);
  CHECK(auth::parse_scope("preview:65535") == 65535);
  for (const char* bad : {"", "CDP", "admin", "preview:", "preview:0", "preview:65536",
                          "preview:080", "preview:8080x", "preview:-1", "preview: 80",
                          "preview:99999999999999999999", "view:1", "preview:8080@prv_x"}) {
    INFO(bad);
    CHECK_FALSE(auth::parse_scope(bad));
  }
  // Tokens carry the preview they belong to; clients name only the port.
  CHECK(auth::preview_scope(8080, "prv_x") == "preview:8080@prv_x");
}

TEST_CASE("verify_any accepts any listed scope, a wrong scope is 403, not 401") {
  testing::FakeClock clock(1000);
  TokenService svc(one_key(), clock);
  auto control = svc.issue(kSid, "control", 2000, 0);
  auto view = svc.issue(kSid, "view", 2000, 0);
  CHECK(svc.verify_any(control, kSid, {"view", "control"}));
  CHECK(svc.verify_any(view, kSid, {"view", "control"}));
  auto denied = svc.verify_any(view, kSid, {"control"});
  REQUIRE_FALSE(denied);
  CHECK(denied.error().code == "token_scope");
  CHECK(denied.error().errc == Errc::kPermissionDenied);
  // A view token used as a preview token, and one port's preview token on another port.
  CHECK_FALSE(svc.verify(view, kSid, "preview:8000"));
  CHECK_FALSE(svc.verify(svc.issue(kSid, "preview:8000", 2000, 0), kSid, "preview:8001"));
  // Expiry is checked after scope, at the instant, whatever the scope.
  clock.set(1999);
  CHECK(svc.verify_any(control, kSid, {"control"}));
  clock.set(2000);
  auto expired = svc.verify_any(control, kSid, {"control"});
  REQUIRE_FALSE(expired);
  CHECK(expired.error().code == "token_expired");
}

TEST_CASE("add_key rotates: the new key signs after a reload, the old verifies until removed") {
  testing::FakeClock clock(1000);
  auto dir = std::filesystem::temp_directory_path() / ("cabin-keys-" + random_hex(6));
  auto first = TokenService::load_or_create_keys(dir);
  REQUIRE(first);
  TokenService svc(*first, clock);
  std::string old_kid = svc.signing_key_id();
  auto old_token = svc.issue(kSid, "cdp", 2000, 0);

  auto kid = TokenService::add_key(dir);
  REQUIRE(kid);
  CHECK(*kid > old_kid);
  auto both = TokenService::load_or_create_keys(dir);
  REQUIRE(both);
  CHECK(both->size() == 2);
  svc.set_keys(*both);
  CHECK(svc.signing_key_id() == *kid);
  auto new_token = svc.issue(kSid, "cdp", 2000, 0);
  CHECK(svc.verify(old_token, kSid, "cdp"));
  CHECK(svc.verify(new_token, kSid, "cdp"));

  std::filesystem::remove(dir / ("token-" + old_kid + ".key"));
  auto only_new = TokenService::load_or_create_keys(dir);
  REQUIRE(only_new);
  svc.set_keys(*only_new);
  CHECK_FALSE(svc.verify(old_token, kSid, "cdp"));
  CHECK(svc.verify(new_token, kSid, "cdp"));
  // Two rotations within one second still give increasing ids.
  auto k2 = TokenService::add_key(dir);
  auto k3 = TokenService::add_key(dir);
  REQUIRE(k2);
  REQUIRE(k3);
  CHECK(*k3 > *k2);
  CHECK(*k2 > *kid);
  std::filesystem::remove_all(dir);
}

TEST_CASE("signing keys are created once and reloaded") {
  auto dir = std::filesystem::temp_directory_path() / ("cabin-keys-" + random_hex(6));
  auto first = TokenService::load_or_create_keys(dir);
  REQUIRE(first);
  REQUIRE(first->size() == 1);
  auto again = TokenService::load_or_create_keys(dir);
  REQUIRE(again);
  CHECK(*again == *first);
  std::filesystem::remove_all(dir);
}

TEST_CASE("API keys: bearer check and generation") {
  CHECK(auth::check_bearer("Bearer abcdefghijklmnopq", "abcdefghijklmnopq"));
  CHECK_FALSE(auth::check_bearer("Bearer abcdefghijklmnopX", "abcdefghijklmnopq"));
  CHECK_FALSE(auth::check_bearer("bearer abcdefghijklmnopq", "abcdefghijklmnopq"));
  CHECK_FALSE(auth::check_bearer("Bearer ", "abcdefghijklmnopq"));
  CHECK_FALSE(auth::check_bearer("", "abcdefghijklmnopq"));

  auto dir = std::filesystem::temp_directory_path() / ("cabin-key-" + random_hex(6));
  std::filesystem::create_directories(dir);
  auto made = auth::load_or_create_api_key(dir, nullptr);
  REQUIRE(made);
  CHECK(made->generated);
  auto loaded = auth::load_or_create_api_key(dir, nullptr);
  REQUIRE(loaded);
  CHECK_FALSE(loaded->generated);
  CHECK(loaded->key == made->key);
  auto env = auth::load_or_create_api_key(dir, "from-the-environment-1234");
  REQUIRE(env);
  CHECK(env->key == "from-the-environment-1234");
  CHECK_FALSE(auth::load_or_create_api_key(dir, "short"));
  CHECK_FALSE(auth::load_or_create_api_key(dir, "has a space in it........"));
  std::filesystem::remove_all(dir);
}
