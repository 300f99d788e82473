// Fuzz target: the egress policy's parsers (a "network" object, hosts, CIDR ranges) and its
// decisions on what they accept.
#include <cstdint>
#include <string_view>

#include "common/json_fields.h"
#include "server/egress/policy.h"

using namespace cabin::egress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const Boundary boundary;
  auto host = canonical_host(in);
  if (host) {
    // A canonical host is stable: canonicalising its text again gives the same host.
    auto again = canonical_host(host->to_string());
    if (!again || again->to_string() != host->to_string()) __builtin_trap();
    if (host->is_ip()) (void)always_denied(*host->ip, boundary);
  }
  if (auto c = parse_cidr(in); c && !c->contains(c->base)) __builtin_trap();
  (void)parse_host_pattern(in);
  auto j = cabin::parse_object(in);
  if (!j) return 0;
  auto p = parse_policy(*j);
  if (!p) return 0;
  // What the policy answers parses back (secret values aside) into the same answer.
  auto shown = policy_json(*p);
  for (const auto& s : shown["secrets"]) {
    if (s.contains("value")) __builtin_trap();  // values never leave cabind
  }
  shown.erase("secrets");
  auto back = parse_policy(shown);
  if (!back) __builtin_trap();
  shown["secrets"] = nlohmann::json::array();
  if (policy_json(*back) != shown) __builtin_trap();
  if (host) {
    for (const char* method : {"", "GET", "POST"})
      (void)check_host(*p, boundary, *host, 443, method);
  }
  return 0;
}
