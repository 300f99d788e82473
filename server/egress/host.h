// Hosts and addresses as the egress policy sees them: a name canonicalised once, an IP literal in
// any form a client may write, CIDR ranges, and the addresses no policy can open.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/ip/address.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace cabin::egress {

namespace net = boost::asio;
using IpAddress = net::ip::address;

inline constexpr size_t kMaxHostText = 1024;  // before IDNA; a canonical name is at most 253

// A destination as a client named it. Exactly one of `name` and `ip` is set.
struct Host {
  std::string name;  // canonical: lowercase ASCII (punycode), no trailing dot
  std::optional<IpAddress> ip;
  bool is_ip() const { return ip.has_value(); }
  std::string to_string() const;  // the name, or the address (IPv6 bracketed)
};

// Canonicalises what a client wrote as a host: lowercase; internationalised names to punycode
// (IDNA 2008, UTS 46 mapping); one trailing dot dropped; labels of 1 to 63 letters, digits,
// hyphens or underscores and 253 bytes in all. IP literals become addresses, whatever their
// form: a bracketed IPv6 address, or an IPv4 address as inet_aton takes it (2130706433,
// 0x7f.1, 0177.0.0.1). A name whose last label is numeric and that is no IPv4 address is
// refused, as a URL parser would.
Result<Host> canonical_host(std::string_view text);

// An IPv4 address in any of inet_aton's forms: one to four parts, each decimal, octal (leading
// 0) or hex (0x), the last filling the remaining bytes.
std::optional<net::ip::address_v4> parse_ipv4_any(std::string_view text);

struct Cidr {
  IpAddress base;  // with the host bits cleared
  int prefix = 0;
  bool contains(const IpAddress& a) const;
  std::string to_string() const;
};
// "203.0.113.0/24", "2001:db8::/32"; an address alone is a /32 or /128. Host bits must be zero.
Result<Cidr> parse_cidr(std::string_view text);

// What the server's operator decided around every policy: ranges opened despite the
// always-denied set (a lab, a corporate network, tests), and the host's own addresses.
struct Boundary {
  std::vector<Cidr> open_cidrs;       // --egress-allow-cidr: other networks
  std::vector<Cidr> open_host_cidrs;  // --egress-allow-host-cidr: the host itself, metadata
  std::vector<IpAddress> host_addresses;
};

// Why no policy may reach `a` ("loopback", "private", "link-local", "metadata", ...), or empty
// when it is a public address or in one of the operator's open ranges. The host's own
// addresses, loopback, the unspecified address and the metadata addresses are opened only by
// `open_host_cidrs`, everything else by `open_cidrs`. IPv4-mapped, IPv4-compatible, SIIT, NAT64
// and 6to4 forms are judged by the IPv4 address they carry.
std::string_view always_denied(const IpAddress& a, const Boundary& boundary);
// Whether always_denied's `why` is one that only `open_host_cidrs` opens.
bool opened_for_host(std::string_view why);

// The addresses of this host's interfaces.
std::vector<IpAddress> local_addresses();

}  // namespace cabin::egress
