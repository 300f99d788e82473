// Fuzz target: the preview proxy's parsers (Host, target, token parameter, cookies, Location and
// Set-Cookie rewriting, the token redirect, Origin), with the invariants the proxy relies on.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "server/preview/preview_request.h"

using namespace cabin::preview;

// Says which invariant broke, then stops as libFuzzer expects.
#define REQUIRE_THAT(cond)                                                       \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "fuzz_preview_request: line %d: %s\n", __LINE__, #cond); \
      __builtin_trap();                                                          \
    }                                                                            \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (auto host = host_name(in)) {
    REQUIRE_THAT(host->find_first_of(":/ ") == std::string::npos || host->front() == '[');
    if (auto addr = parse_preview_host(*host, "preview.test")) {
      REQUIRE_THAT(preview_host(addr->port, addr->session_id, "preview.test") == *host);
    }
  }
  if (check_target(in)) {
    REQUIRE_THAT(!in.empty() && in[0] == '/' && in.size() <= kMaxTarget);
    std::string_view path = in.substr(0, in.find('?'));
    REQUIRE_THAT(path.find("/../") == std::string_view::npos &&
                 path.find("/./") == std::string_view::npos &&
                 path.find('\\') == std::string_view::npos);
  }
  if (auto addr = parse_preview_path(in)) {
    REQUIRE_THAT(addr->bare || (!addr->upstream_target.empty() && addr->upstream_target[0] == '/'));
  }
  auto split = take_token(in);
  size_t q = split.target.find('?');
  std::string query = q == std::string::npos ? "" : "&" + split.target.substr(q + 1);
  REQUIRE_THAT(query.find("&cabin_token=") == std::string::npos);
  std::vector<std::string> found;
  std::string kept = strip_cookie(in, kCookieName, &found);
  REQUIRE_THAT(found.size() <= kMaxCookieTries);
  std::vector<std::string> again;
  (void)strip_cookie(kept, kHostCookieName, &again);
  REQUIRE_THAT(again.empty() && strip_cookie(kept, kCookieName, nullptr) == kept);
  (void)sets_cookie(in, kCookieName);
  std::string no_domain = drop_cookie_domain(in);
  REQUIRE_THAT(drop_cookie_domain(no_domain) == no_domain);
  if (!in.empty() && in[0] == '/') {
    std::string r = redirect_target(in);
    REQUIRE_THAT(r[0] == '/' && (r.size() < 2 || r[1] != '/'));
  }
  (void)same_origin(in, "https", "p-1-aaaaaaaaaaaaaaaaaaaa.preview.test");
  (void)rewrite_location(in, "/preview/prv_aaaaaaaaaaaaaaaaaaaa", 8000);
  std::string c = rewrite_cookie_path(in, "/preview/prv_aaaaaaaaaaaaaaaaaaaa");
  REQUIRE_THAT(c.find("Path=/preview/prv_aaaaaaaaaaaaaaaaaaaa/") != std::string::npos);
  return 0;
}
