// Fuzz target: secrets on their way out. The input's first line is a Content-Type, the rest a
// request's text; bytes 0x01 and 0x02 stand for the placeholders of a secret bound to the host
// and of one bound elsewhere. A bound placeholder never survives a rewrite (in the body, which
// this secret allows; never in another field), one bound elsewhere is always found, and so is
// either in the text fed in pieces.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/egress/secrets.h"

using namespace cabin::egress;

namespace {

const Policy& fuzz_policy() {
  static const Policy p = *parse_policy(nlohmann::json::parse(R"({"mode": "allowlist",
      "allow": [{"host": "api.test"}],
      "secrets": [{"name": "here", "value": "v\"a%l&u\\e+", "hosts": ["api.test"],
                   "substitute": ["body"]},
                  {"name": "there", "value": "w", "hosts": ["*.other.test"]}]})"));
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Policy& p = fuzz_policy();
  static const Host host = *canonical_host("api.test");
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  const std::string_view type = nl == std::string_view::npos ? in : in.substr(0, nl);
  std::string text;
  if (nl != std::string_view::npos) {
    for (char c : in.substr(nl + 1)) {
      if (c == '\x01') {
        text += p.secrets[0].placeholder;
      } else if (c == '\x02') {
        text += p.secrets[1].placeholder;
      } else {
        text += c;
      }
    }
  }
  const bool has_there = text.find(p.secrets[1].placeholder) != std::string::npos;
  if ((placeholder_in(p, host, 443, text, true) == "there") != has_there) __builtin_trap();
  if (!has_there && !placeholder_in(p, host, 443, text, true).empty()) __builtin_trap();
  // Not bound on another port, and never replaced in a field that is not its header.
  if (!placeholder_in(p, host, 8443, text, true).empty() !=
      (has_there || text.find(p.secrets[0].placeholder) != std::string::npos)) {
    __builtin_trap();
  }
  // A body in pieces (cut where the input's length says) is searched across their seams: the
  // scan finds a placeholder exactly when the whole text holds one.
  {
    PlaceholderScan scan(p);
    std::string found;
    const size_t step = 1 + size % 61;
    for (size_t at = 0; at < text.size() && found.empty(); at += step) {
      found = scan.feed(std::string_view(text).substr(at, step));
    }
    const bool any = has_there || text.find(p.secrets[0].placeholder) != std::string::npos;
    if (found.empty() == any) __builtin_trap();
  }
  std::vector<std::string> used;
  std::string field = text;
  replace_placeholders(p, host, 443, {Part::kField, "Cookie"}, field, BodyKind::kText, used);
  if (field != text || !used.empty()) __builtin_trap();
  const BodyKind kind = body_kind(type);
  replace_placeholders(p, host, 443, {Part::kBody, {}}, text,
                       kind == BodyKind::kOpaque ? BodyKind::kText : kind, used);
  if (text.find(p.secrets[0].placeholder) != std::string::npos) __builtin_trap();
  if (used.size() > 1) __builtin_trap();
  return 0;
}
