#include <catch2/catch.hpp>

#include "server/api/ids.h"
#include "server/api/router.h"

using namespace cabin;
using namespace cabin::api;

namespace {
const std::string kRouteSid = "ses_0123456789abcdefghij";
}

TEST_CASE("routes map to typed commands with their auth") {
  struct Case {
    const char* method;
    std::string target;
    RouteId id;
    Auth auth;
  };
  for (const auto& c : std::vector<Case>{
           {"GET", "/healthz", RouteId::kHealthz, Auth::kNone},
           {"GET", "/v1/info", RouteId::kInfo, Auth::kApiKey},
           {"POST", "/v1/sessions", RouteId::kCreateSession, Auth::kApiKey},
           {"POST", "/v1/profiles", RouteId::kCreateProfile, Auth::kApiKey},
           {"GET", "/v1/profiles", RouteId::kListProfiles, Auth::kApiKey},
           {"GET", "/v1/profiles/prf_0123456789abcdefghij", RouteId::kGetProfile, Auth::kApiKey},
           {"DELETE", "/v1/profiles/prf_0123456789abcdefghij", RouteId::kDeleteProfile,
            Auth::kApiKey},
           {"GET", "/v1/sessions/", RouteId::kListSessions, Auth::kApiKey},
           {"GET", "/v1/sessions/" + kRouteSid, RouteId::kGetSession, Auth::kApiKey},
           {"DELETE", "/v1/sessions/" + kRouteSid, RouteId::kDeleteSession, Auth::kApiKey},
           {"PATCH", "/v1/sessions/" + kRouteSid, RouteId::kPatchSession, Auth::kApiKey},
           {"POST", "/v1/sessions/" + kRouteSid + "/keepalive", RouteId::kKeepalive, Auth::kApiKey},
           {"POST", "/v1/sessions/" + kRouteSid + "/fork", RouteId::kFork, Auth::kApiKey},
           {"POST", "/v1/sessions/" + kRouteSid + "/exec", RouteId::kExec, Auth::kApiKey},
           {"POST", "/v1/sessions/" + kRouteSid + "/computer", RouteId::kComputer, Auth::kApiKey},
           {"GET", "/v1/sessions/" + kRouteSid + "/logs", RouteId::kLogs, Auth::kApiKey},
           {"GET", "/v1/sessions/" + kRouteSid + "/screenshot?format=jpeg", RouteId::kScreenshot,
            Auth::kApiKey},
           {"GET", "/v1/sessions/" + kRouteSid + "/cdp?token=x", RouteId::kCdpBrowser,
            Auth::kCdpToken},
           {"GET", "/v1/sessions/" + kRouteSid + "/json/version/", RouteId::kJsonVersion,
            Auth::kCdpToken},
           {"GET", "/v1/sessions/" + kRouteSid + "/json", RouteId::kJsonList, Auth::kCdpToken},
           {"GET", "/v1/sessions/" + kRouteSid + "/json/list", RouteId::kJsonList, Auth::kCdpToken},
           {"GET", "/v1/sessions/" + kRouteSid + "/devtools/page/ABCDEF0123", RouteId::kCdpPage,
            Auth::kCdpToken},
           {"GET", "/", RouteId::kConsolePage, Auth::kNone},
           {"GET", "/?x=1", RouteId::kConsolePage, Auth::kNone},
           {"GET", "/ui/live-AB12_cd.js", RouteId::kUiAsset, Auth::kNone},
           {"GET", "/v1/sessions/" + kRouteSid + "/live?token=x", RouteId::kLivePage,
            Auth::kViewToken},
           {"GET", "/v1/sessions/" + kRouteSid + "/live/", RouteId::kLivePage, Auth::kViewToken},
           {"GET", "/v1/sessions/" + kRouteSid + "/live/status?token=x", RouteId::kLiveStatus,
            Auth::kViewToken},
           {"POST", "/v1/sessions/" + kRouteSid + "/tokens", RouteId::kMintToken, Auth::kApiKey},
           {"POST", "/v1/sessions/" + kRouteSid + "/tokens/revoke", RouteId::kRevokeTokens,
            Auth::kApiKey},
           {"POST", "/v1/sessions/" + kRouteSid + "/previews", RouteId::kCreatePreview,
            Auth::kApiKey},
           {"GET", "/v1/sessions/" + kRouteSid + "/previews", RouteId::kListPreviews,
            Auth::kApiKey},
           {"DELETE", "/v1/sessions/" + kRouteSid + "/previews/prv_0123456789abcdefghij",
            RouteId::kDeletePreview, Auth::kApiKey},
           {"GET", "/v1/sessions/" + kRouteSid + "/vnc?token=x", RouteId::kVnc, Auth::kViewToken},
       }) {
    INFO(c.method << " " << c.target);
    auto r = route(c.method, c.target);
    REQUIRE(r);
    CHECK(r->id == c.id);
    CHECK(r->auth == c.auth);
  }
  auto page = route("GET", "/v1/sessions/" + kRouteSid + "/devtools/page/ABC?token=t%2Bx");
  REQUIRE(page);
  CHECK(page->session_id == kRouteSid);
  CHECK(page->target_id == "ABC");
  CHECK(page->query.at("token") == "t+x");
  auto asset = route("GET", "/ui/style-X1.css");
  REQUIRE(asset);
  CHECK(asset->asset == "style-X1.css");
}

TEST_CASE("web UI paths name one plain file or nothing") {
  for (std::string t : {"/ui", "/ui/", "/ui/.env", "/ui/..", "/ui/a/b.js", "/ui/%2e%2e",
                        "/ui/a%2fb.js", "/ui/..%2f..%2fetc%2fpasswd", "/ui/a b.js", "/ui/a\\b",
                        "/ui/../v1/info", "/index.html", "/v1/sessions/ses_0123456789abcdefghij/live/x"}) {
    INFO(t);
    auto r = route("GET", t);
    REQUIRE_FALSE(r);
    CHECK(http_status(r.error().errc) == 404);
  }
  CHECK(route("GET", "/ui/" + std::string(128, 'a')));
  CHECK_FALSE(route("GET", "/ui/" + std::string(129, 'a')));
  CHECK(http_status(route("POST", "/").error().errc) == 405);
  CHECK(http_status(route("DELETE", "/ui/a.js").error().errc) == 405);
  CHECK(http_status(route("POST", "/v1/sessions/" + kRouteSid + "/live").error().errc) == 405);
}

TEST_CASE("bad paths are 404, bad methods 405, bad queries 400") {
  for (std::string t : std::vector<std::string>{
           "/v2/info", "/v1/sessions/../info", "/v1/sessions/" + kRouteSid + "/..", "/v1//sessions",
           "/v1/sessions/ses_short", "/v1/sessions/SES_X", "/v1/sessions/" + kRouteSid + "/nope",
           "/v1/sessions/" + kRouteSid + "%2f..", "/v1/sessions/" + std::string(1 << 20, 'a'),
           "relative", "/v1/sessions/" + kRouteSid + "/devtools/page/a.b",
           "/v1/sessions/" + kRouteSid + "/devtools/page/" + std::string(65, 'A')}) {
    INFO(t.substr(0, 80));
    auto r = route("GET", t);
    REQUIRE_FALSE(r);
    CHECK(http_status(r.error().errc) == 404);
  }
  auto m = route("PUT", "/v1/sessions");
  REQUIRE_FALSE(m);
  CHECK(http_status(m.error().errc) == 405);
  CHECK(http_status(route("POST", "/healthz").error().errc) == 405);
  auto q = route("GET", "/v1/info?a=%zz");
  REQUIRE_FALSE(q);
  CHECK(http_status(q.error().errc) == 400);
  std::string many = "/v1/info?";
  for (int i = 0; i < 20; ++i) many += "k" + std::to_string(i) + "=v&";
  CHECK_FALSE(route("GET", many));
}

TEST_CASE("session ids have one alphabet and one length") {
  for (int i = 0; i < 100; ++i) {
    auto id = new_session_id();
    REQUIRE(valid_session_id(id));
  }
  CHECK(new_session_id() != new_session_id());
  CHECK_FALSE(valid_session_id("ses_0123456789abcdefghiJ"));
  CHECK_FALSE(valid_session_id("ses_0123456789abcdefghi"));
  CHECK_FALSE(valid_session_id("xes_0123456789abcdefghij"));
  CHECK_FALSE(valid_session_id("ses_0123456789abcdefgh/."));
}

TEST_CASE("percent decoding rejects broken escapes") {
  CHECK(*percent_decode("a%20b+c") == "a b c");
  CHECK_FALSE(percent_decode("%"));
  CHECK_FALSE(percent_decode("%4"));
  CHECK_FALSE(percent_decode("%g0"));
}

TEST_CASE("each token route names the scopes it accepts") {
  using V = std::vector<std::string_view>;
  CHECK(token_scopes(Auth::kNone).empty());
  CHECK(token_scopes(Auth::kApiKey).empty());
  CHECK(token_scopes(Auth::kCdpToken) == V{"cdp"});
  CHECK(token_scopes(Auth::kViewToken) == V{"view", "control"});
  CHECK(token_scopes(Auth::kControlToken) == V{"control"});
  auto del = route("DELETE", "/v1/sessions/" + kRouteSid + "/previews/prv_0123456789abcdefghij");
  REQUIRE(del);
  CHECK(del->preview_id == "prv_0123456789abcdefghij");
  auto bad = route("DELETE", "/v1/sessions/" + kRouteSid + "/previews/prv_short");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == "preview_not_found");
  auto get_revoke = route("GET", "/v1/sessions/" + kRouteSid + "/tokens/revoke");
  REQUIRE_FALSE(get_revoke);
  CHECK(get_revoke.error().errc == Errc::kMethodNotAllowed);
  CHECK_FALSE(route("POST", "/v1/sessions/" + kRouteSid + "/tokens/other"));
}

TEST_CASE("percent_encode keeps the unreserved characters and round-trips through percent_decode") {
  CHECK(percent_encode("aZ09-._~") == "aZ09-._~");
  CHECK(percent_encode("a b+c/é") == "a%20b%2Bc%2F%C3%A9");
  const std::string all = [] {
    std::string s;
    for (int c = 0; c < 256; ++c) s.push_back(static_cast<char>(c));
    return s;
  }();
  auto back = percent_decode(percent_encode(all));
  REQUIRE(back);
  CHECK(*back == all);
}
