// Fuzz target: the reader of DNS answers. The first byte picks A or AAAA; the rest is the answer
// to a query for site.test, whose id is the answer's own (the resolver checks ids first).
#include <cstdint>
#include <span>

#include "server/egress/dns.h"

using namespace cabin::egress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const DnsType type = data[0] & 1 ? DnsType::kA : DnsType::kAaaa;
  const std::span<const uint8_t> msg(data + 1, size - 1);
  const auto id = static_cast<uint16_t>(msg[0] << 8 | msg[1]);
  auto a = parse_dns_answer(msg, id, "site.test", type);
  if (a) {
    for (const auto& addr : a->addresses) {
      if (addr.is_v4() != (type == DnsType::kA)) __builtin_trap();  // only the type asked for
    }
    if (a->truncated && !a->addresses.empty()) __builtin_trap();
  }
  return 0;
}
