#include <catch2/catch.hpp>
#include <map>
#include <optional>

#include "server/preview/preview_request.h"
#include "server/preview/previews.h"
#include "tests/fakes/fake_clock.h"

using namespace cabin;
using namespace cabin::preview;

namespace {
const std::string kPreviewSid = "ses_0123456789abcdefghij";
const std::string kPrv = "prv_0123456789abcdefghij";
}  // namespace

TEST_CASE("Host headers: names, ports and IP literals") {
  CHECK(host_name("Example.COM:8080") == "example.com");
  CHECK(host_name("127.0.0.1") == "127.0.0.1");
  CHECK(host_name("[::1]:443") == "[::1]");
  for (const char* bad : {"", "a b", "ex ample.com", "host:", "host:80:80", "host:8x", "[::1",
                          "[nothost]:80", "a/b", "a@b", "host:123456"}) {
    INFO(bad);
    CHECK_FALSE(host_name(bad));
  }
  CHECK(is_ip_literal("127.0.0.1"));
  CHECK(is_ip_literal("[::1]"));
  CHECK_FALSE(is_ip_literal("localhost"));
}

TEST_CASE("host-based addresses round-trip and reject lookalikes") {
  std::string host = preview_host(8000, kPreviewSid, "preview.test");
  CHECK(host == "p-8000-0123456789abcdefghij.preview.test");
  auto a = parse_preview_host(host, "preview.test");
  REQUIRE(a);
  CHECK(a->port == 8000);
  CHECK(a->session_id == kPreviewSid);
  for (std::string bad : {"p-8000-0123456789abcdefghij.evil.test", "p-8000-0123456789abcdefghij.xpreview.test",
                          "p-0-0123456789abcdefghij.preview.test", "p-080-0123456789abcdefghij.preview.test",
                          "p-70000-0123456789abcdefghij.preview.test", "p-8000-short.preview.test",
                          "q-8000-0123456789abcdefghij.preview.test", "preview.test",
                          "x.p-8000-0123456789abcdefghij.preview.test"}) {
    INFO(bad);
    CHECK_FALSE(parse_preview_host(bad, "preview.test"));
  }
  CHECK_FALSE(parse_preview_host(host, ""));

  // A node's session: its id's '_' is a '-' in the host name.
  host = preview_host(3000, "ses_n2_0123456789abcdefghij", "preview.test");
  CHECK(host == "p-3000-n2-0123456789abcdefghij.preview.test");
  a = parse_preview_host(host, "preview.test");
  REQUIRE(a);
  CHECK(a->session_id == "ses_n2_0123456789abcdefghij");
  CHECK_FALSE(parse_preview_host("p-3000-n2_0123456789abcdefghij.preview.test", "preview.test"));
  CHECK_FALSE(parse_preview_host("p-3000-n-2-0123456789abcdefghij.preview.test", "preview.test"));
}

TEST_CASE("targets: origin-form only, no dot segments, decoded or not") {
  for (const char* ok : {"/", "/a/b?x=1", "/a.b/c..d/...", "/%41?q=..%2f", "/x?a=/../"}) {
    INFO(ok);
    CHECK(check_target(ok));
  }
  for (const std::string& bad : std::vector<std::string>{"", "http://evil/", "*", "/a/../b", "/a/./b", "/..", "/a/%2e%2E/b",
                          "/a/%2E", "/a%2fb", "/a%5cb", "/a%00b", "/a\\b", "/a b", "/a#f",
                          "/a%zz", "/a%4", std::string("/a\x01", 3),
                          "/" + std::string(kMaxTarget, 'a')}) {
    INFO(bad);
    CHECK_FALSE(check_target(bad));
  }
}

TEST_CASE("path-based addresses: id, rest, bare") {
  auto a = parse_preview_path("/preview/" + kPrv + "/x/y?z=1");
  REQUIRE(a);
  CHECK(a->preview_id == kPrv);
  CHECK(a->upstream_target == "/x/y?z=1");
  CHECK_FALSE(a->bare);
  auto bare = parse_preview_path("/preview/" + kPrv + "?cabin_token=t");
  REQUIRE(bare);
  CHECK(bare->bare);
  CHECK(parse_preview_path("/preview/prv_short/").error().code == "preview_not_found");
  CHECK(parse_preview_path("/preview/" + kPrv + "/../other").error().code == "bad_target");
  CHECK_FALSE(parse_preview_path("/v1/info"));
}

TEST_CASE("the token parameter and the cookie are taken out, the rest stays") {
  auto s = take_token("/a?x=1&cabin_token=abc%2Edef&y=2");
  CHECK(s.token == "abc.def");
  CHECK(s.target == "/a?x=1&y=2");
  auto only = take_token("/a?cabin_token=t");
  CHECK(only.token == "t");
  CHECK(only.target == "/a");
  auto none = take_token("/a?token=t");
  CHECK_FALSE(none.token);
  CHECK(none.target == "/a?token=t");

  std::vector<std::string> found;
  CHECK(strip_cookie("a=1; cabin_preview=tok; b=2", kCookieName, &found) == "a=1; b=2");
  CHECK(found == std::vector<std::string>{"tok"});
  found.clear();
  CHECK(strip_cookie("cabin_preview=tok", kCookieName, &found).empty());
  CHECK(strip_cookie("xcabin_preview=1", kCookieName, nullptr) == "xcabin_preview=1");
  CHECK(sets_cookie("cabin_preview=x; Path=/", kCookieName));
  CHECK_FALSE(sets_cookie("other=cabin_preview", kCookieName));
}

TEST_CASE("every preview cookie is a candidate, in order, bounded, none reaches the app") {
  std::vector<std::string> found;
  // A cookie tossed by a sibling preview, before and after the real one.
  CHECK(strip_cookie("cabin_preview=TOSSED; other=1; cabin_preview=LEGIT", kCookieName, &found) ==
        "other=1");
  CHECK(found == std::vector<std::string>{"TOSSED", "LEGIT"});
  found.clear();
  CHECK(strip_cookie("cabin_preview=LEGIT; cabin_preview=TOSSED", kCookieName, &found).empty());
  CHECK(found == std::vector<std::string>{"LEGIT", "TOSSED"});

  // Under TLS only the __Host- name is accepted; both names are taken out either way.
  found.clear();
  CHECK(strip_cookie("cabin_preview=PLANTED; __Host-cabin_preview=LEGIT; a=1", kHostCookieName,
                     &found) == "a=1");
  CHECK(found == std::vector<std::string>{"LEGIT"});
  found.clear();
  CHECK(strip_cookie("__Host-cabin_preview=X; cabin_preview=", kCookieName, &found).empty());
  CHECK(found.empty());

  std::string many;
  for (int i = 0; i < 20; ++i) many += "cabin_preview=t" + std::to_string(i) + "; ";
  found.clear();
  CHECK(strip_cookie(many + "app=1", kCookieName, &found) == "app=1");
  REQUIRE(found.size() == kMaxCookieTries);
  CHECK(found.front() == "t0");
  CHECK(found.back() == "t7");
}

TEST_CASE("the token's redirect stays on the preview's origin") {
  CHECK(redirect_target("/") == "/");
  CHECK(redirect_target("/a/b?x=1") == "/a/b?x=1");
  CHECK(redirect_target("//evil.example/") == "/evil.example/");
  CHECK(redirect_target("///evil.example/x?y") == "/evil.example/x?y");
  CHECK(redirect_target("//") == "/");
  // What the proxy sends for "//evil.example/?cabin_token=T".
  CHECK(redirect_target(take_token("//evil.example/?cabin_token=T").target) == "/evil.example/");
}

TEST_CASE("Set-Cookie loses its Domain attributes and nothing else") {
  CHECK(drop_cookie_domain("a=1; Domain=preview.test; Path=/; HttpOnly") ==
        "a=1; Path=/; HttpOnly");
  CHECK(drop_cookie_domain("a=1;domain=.x;DOMAIN = y ; Secure") == "a=1; Secure");
  CHECK(drop_cookie_domain("domain=1; Path=/") == "domain=1; Path=/");
  CHECK(drop_cookie_domain("a=1; Path=/domain") == "a=1; Path=/domain");
  CHECK(drop_cookie_domain("a=1") == "a=1");
}

TEST_CASE("Origin: the preview's own scheme, host and port only") {
  const std::string host = "p-8000-0123456789abcdefghij.preview.test";
  CHECK(same_origin("http://" + host + ":8080", "http", host + ":8080"));
  CHECK(same_origin("https://" + host, "https", host + ":443"));
  CHECK(same_origin("https://" + host + ":443", "https", host));
  CHECK(same_origin("HTTP://P-8000-0123456789ABCDEFGHIJ.preview.test", "http", host + ":80"));
  for (const std::string& other : std::vector<std::string>{
           "http://p-8001-0123456789abcdefghij.preview.test:8080", "https://" + host + ":8080",
           "http://" + host + ":8081", "http://" + host, "null", "", "http://" + host + ":8080/",
           "http://evil.example:8080", "http://" + host + ".evil.example:8080", "http://"}) {
    INFO(other);
    CHECK_FALSE(same_origin(other, "http", host + ":8080"));
  }
}

TEST_CASE("Location and Set-Cookie paths are mapped under the prefix") {
  const std::string p = "/preview/" + kPrv;
  CHECK(rewrite_location("/x?y", p, 8000) == p + "/x?y");
  CHECK(rewrite_location("http://127.0.0.1:8000/x", p, 8000) == p + "/x");
  CHECK(rewrite_location("http://localhost:8000", p, 8000) == p + "/");
  CHECK(rewrite_location("//evil/x", p, 8000) == "//evil/x");
  CHECK(rewrite_location("https://example.com/", p, 8000) == "https://example.com/");
  CHECK(rewrite_location("http://127.0.0.1:80001/x", p, 8000) == "http://127.0.0.1:80001/x");
  CHECK(rewrite_cookie_path("a=1; Path=/; HttpOnly", p) == "a=1; Path=" + p + "/; HttpOnly");
  CHECK(rewrite_cookie_path("a=1; path=/app", p) == "a=1; Path=" + p + "/app");
  CHECK(rewrite_cookie_path("a=1", p) == "a=1; Path=" + p + "/");
}

TEST_CASE("grants: one per session and port, expiring, bounded") {
  testing::FakeClock clock(1000);
  Previews previews(clock);
  std::optional<Grant> replaced;
  auto g = previews.create(kPreviewSid, 8000, 1060, &replaced);
  REQUIRE(g);
  CHECK_FALSE(replaced);
  CHECK(previews.find(g->id));
  CHECK(previews.find_port(kPreviewSid, 8000)->id == g->id);
  auto g2 = previews.create(kPreviewSid, 8000, 1100, &replaced);
  REQUIRE(g2);
  REQUIRE(replaced);
  CHECK(replaced->id == g->id);
  CHECK_FALSE(previews.find(g->id));
  clock.set(1099);
  CHECK(previews.find(g2->id));
  clock.set(1100);
  CHECK_FALSE(previews.find(g2->id));
  CHECK(previews.list(kPreviewSid).empty());
  clock.set(1000);
  for (int port = 1; port < static_cast<int>(kMaxPreviewsPerSession); ++port) {
    REQUIRE(previews.create(kPreviewSid, port, 2000, nullptr));
  }
  CHECK(previews.create(kPreviewSid, 9999, 2000, nullptr).error().code == "too_many_previews");
  CHECK_FALSE(previews.remove("ses_aaaaaaaaaaaaaaaaaaaa", g2->id));
  CHECK(previews.remove(kPreviewSid, g2->id));
}

TEST_CASE("grants reach their keeper, and a restart restores the live ones", "[preview]") {
  testing::FakeClock clock(1000);
  std::map<std::string, Grant> kept;
  GrantKeeper keeper{.saved = [&](const Grant& g) { kept[g.id] = g; },
                     .removed = [&](const std::string& id) { kept.erase(id); }};
  Previews first(clock);
  first.use_keeper(keeper);
  auto a = first.create("ses_a", 8000, 2000, nullptr);
  auto b = first.create("ses_b", 8000, 1500, nullptr);
  auto gone = first.create("ses_gone", 8000, 2000, nullptr);
  REQUIRE((a.ok() && b.ok() && gone.ok()));
  std::optional<Grant> replaced;
  auto a2 = first.create("ses_a", 8000, 3000, &replaced);  // replaces a
  REQUIRE(a2.ok());
  CHECK(kept.size() == 3);
  CHECK_FALSE(kept.count(a->id));

  clock.set(1600);  // b has expired; ses_gone is no longer live
  Previews next(clock);
  next.use_keeper(keeper);
  std::vector<Grant> all;
  for (const auto& [_, g] : kept) all.push_back(g);
  next.restore(all, [](const std::string& s) { return s != "ses_gone"; });
  CHECK(next.find(a2->id));
  CHECK_FALSE(next.find(b->id));
  CHECK_FALSE(next.find(gone->id));
  CHECK(kept.size() == 1);  // the keeper forgot what was dropped
  REQUIRE(next.remove("ses_a", a2->id));
  CHECK(kept.empty());
}
