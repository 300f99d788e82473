// Fuzz target: upstream proxies, their URLs and what they answer (HTTP CONNECT and SOCKS5).
#include <cstdint>
#include <string_view>

#include "server/egress/upstream.h"

using namespace cabin::egress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (auto p = parse_upstream_proxy(in)) {
    // What is shown parses back to the same proxy, without its credentials.
    auto again = parse_upstream_proxy(p->to_string());
    if (!again || again->to_string() != p->to_string() || !again->user.empty()) __builtin_trap();
  }
  for (auto r : {parse_connect_reply(in), parse_socks5_method(in, true), parse_socks5_auth(in),
                 parse_socks5_connect(in)}) {
    // A whole reply never takes more than it was given.
    if (r.status == UpstreamReply::Status::kOk && (r.size == 0 || r.size > in.size()))
      __builtin_trap();
  }
  return 0;
}
