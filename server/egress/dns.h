// DNS on the host, for names the policy has allowed: a fresh A or AAAA query with one question
// and the canonical (lowercase) name, never a sandbox's own packet, and a strict reader of the
// answer. The sandbox has no resolver; this is the only lookup its traffic causes.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/udp.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "server/egress/host.h"

namespace cabin::egress {

enum class DnsType : uint16_t { kA = 1, kAaaa = 28 };

inline constexpr size_t kMaxDnsMessage = 64 * 1024;
inline constexpr int kMaxCnameHops = 8;

// The query for `name` (canonical, as canonical_host makes it), recursion desired.
std::vector<uint8_t> dns_query(uint16_t id, std::string_view name, DnsType type);

struct DnsAnswer {
  std::vector<IpAddress> addresses;  // empty: the name has none of this type
  uint32_t ttl = 0;                  // the least TTL of the records used
  bool truncated = false;            // TC set: ask again over TCP
  bool no_such_name = false;         // NXDOMAIN
};

// Reads the answer to dns_query(id, name, type): the header, the echoed question, and the
// answer records, following a CNAME chain of at most kMaxCnameHops from `name`. Anything
// malformed, or an answer to another question, is an error.
Result<DnsAnswer> parse_dns_answer(std::span<const uint8_t> message, uint16_t id,
                                   std::string_view name, DnsType type);

struct ResolverConfig {
  // Asked in turn; empty: none (every lookup fails), unless the name is pinned.
  std::vector<net::ip::udp::endpoint> servers;
  // NAME -> addresses, answered without a query (--egress-resolve).
  std::map<std::string, std::vector<IpAddress>> pinned;
  std::chrono::milliseconds timeout{2000};  // per query and server
};

// The name servers of /etc/resolv.conf's text, on port 53.
std::vector<net::ip::udp::endpoint> resolv_conf_servers(std::string_view text);
// The same, of this machine's /etc/resolv.conf.
std::vector<net::ip::udp::endpoint> system_name_servers();

// Looks names up, on the executor it is used from.
class Resolver {
 public:
  explicit Resolver(ResolverConfig config) : config_(std::move(config)) {}
  // The A and AAAA addresses of `name` (canonical), asked fresh each time; a pinned name is
  // answered from its pins. An error says why none could be had.
  net::awaitable<Result<std::vector<IpAddress>>> resolve(std::string name) const;
  const ResolverConfig& config() const { return config_; }

 private:
  net::awaitable<Result<DnsAnswer>> ask(std::string name, DnsType type) const;
  ResolverConfig config_;
};

}  // namespace cabin::egress
