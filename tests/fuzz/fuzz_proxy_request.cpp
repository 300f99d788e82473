// Fuzz target: the egress proxy's request line and Host checks. The input is "METHOD TARGET",
// a newline, then the Host header's value.
#include <cstdint>
#include <string_view>

#include "server/egress/proxy_request.h"

using namespace cabin::egress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  std::string_view line = in.substr(0, nl), host;
  if (nl != std::string_view::npos) host = in.substr(nl + 1);
  const size_t sp = line.find(' ');
  const std::string_view method = line.substr(0, sp);
  const std::string_view target = sp == std::string_view::npos ? "" : line.substr(sp + 1);
  auto t = parse_proxy_target(method, target, host);
  if (t) {
    // What was accepted prints as an authority that parses back to itself.
    auto again = parse_authority(t->authority.to_string());
    if (!again || !(*again == t->authority)) __builtin_trap();
    if (!t->tunnel && (t->origin_target.empty() || t->origin_target[0] != '/')) __builtin_trap();
  }
  (void)parse_authority(in, 80);
  return 0;
}
