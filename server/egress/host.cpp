#include "server/egress/host.h"

#include <idn2.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

namespace cabin::egress {
namespace {

Error bad_host(std::string why) {
  return make_error(Errc::kInvalidArgument, "invalid_host", std::move(why));
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  return (c | 0x20) - 'a' + 10;
}

// One inet_aton part; nullopt if malformed or above 2^32 - 1.
std::optional<uint64_t> ipv4_part(std::string_view p) {
  if (p.empty()) return std::nullopt;
  int base = 10;
  if (p.size() >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
    base = 16;
    p.remove_prefix(2);
    if (p.empty()) return 0;  // "0x" is zero, as URL parsers take it
  } else if (p.size() > 1 && p[0] == '0') {
    base = 8;
    p.remove_prefix(1);
  }
  uint64_t v = 0;
  for (char c : p) {
    int d;
    if (base == 16) {
      if (!is_hex(c)) return std::nullopt;
      d = hex_value(c);
    } else {
      if (!is_digit(c) || c - '0' >= base) return std::nullopt;
      d = c - '0';
    }
    v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    if (v > 0xffffffffULL) return std::nullopt;
  }
  return v;
}

// The IPv4 address an IPv6 address carries in a form that reaches it: IPv4-mapped and
// IPv4-compatible (::/96, other than :: and ::1), NAT64 (64:ff9b::/96) and 6to4 (2002::/16).
std::optional<net::ip::address_v4> embedded_v4(const net::ip::address_v6& a) {
  const auto b = a.to_bytes();
  auto v4_at = [&](size_t i) {
    return net::ip::address_v4(net::ip::address_v4::bytes_type{b[i], b[i + 1], b[i + 2], b[i + 3]});
  };
  const bool first80_zero =
      std::all_of(b.begin(), b.begin() + 10, [](uint8_t x) { return x == 0; });
  if (first80_zero && b[10] == 0xff && b[11] == 0xff) return v4_at(12);
  // ::ffff:0:0/96, IPv4-translated (SIIT, RFC 2765).
  const bool first64_zero = std::all_of(b.begin(), b.begin() + 8, [](uint8_t x) { return x == 0; });
  if (first64_zero && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0) return v4_at(12);
  if (first80_zero && b[10] == 0 && b[11] == 0) {
    const bool small = b[12] == 0 && b[13] == 0 && b[14] == 0 && b[15] <= 1;  // :: and ::1
    if (!small) return v4_at(12);
  }
  static constexpr std::array<uint8_t, 12> kNat64{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::equal(kNat64.begin(), kNat64.end(), b.begin())) return v4_at(12);
  if (b[0] == 0x20 && b[1] == 0x02) return v4_at(2);
  return std::nullopt;
}

bool in_v4(const net::ip::address_v4& a, uint32_t base, int prefix) {
  const uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  return (a.to_uint() & mask) == base;
}

std::string_view classify_v4(const net::ip::address_v4& a) {
  struct Range {
    uint32_t base;
    int prefix;
    std::string_view why;
  };
  // Checked in order: the metadata address before the link-local range holding it.
  static constexpr Range kRanges[] = {
      {0xA9FEA9FE, 32, "metadata"},        // 169.254.169.254
      {0x00000000, 8, "unspecified"},      // 0.0.0.0/8
      {0x0A000000, 8, "private"},          // 10/8
      {0x64400000, 10, "shared (CGNAT)"},  // 100.64/10
      {0x7F000000, 8, "loopback"},         // 127/8
      {0xA9FE0000, 16, "link-local"},      // 169.254/16
      {0xAC100000, 12, "private"},         // 172.16/12
      {0xC0000000, 24, "reserved"},        // 192.0.0/24, IETF protocol assignments
      {0xC0A80000, 16, "private"},         // 192.168/16
      {0xC6120000, 15, "reserved"},        // 198.18/15, benchmarking
      {0xE0000000, 4, "multicast"},        // 224/4
      {0xF0000000, 4, "reserved"},         // 240/4 and the broadcast address
  };
  for (const auto& r : kRanges) {
    if (in_v4(a, r.base, r.prefix)) return r.why;
  }
  return {};
}

std::string_view classify_v6(const net::ip::address_v6& a) {
  const auto b = a.to_bytes();
  static const auto kMetadata = net::ip::make_address_v6("fd00:ec2::254");
  if (a == kMetadata) return "metadata";
  if (a.is_unspecified()) return "unspecified";
  if (a.is_loopback()) return "loopback";
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "link-local";  // fe80::/10
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "private";     // fec0::/10, site-local
  if ((b[0] & 0xfe) == 0xfc) return "private";                     // fc00::/7
  if (b[0] == 0xff) return "multicast";
  // 64:ff9b:1::/48, local-use NAT64: the IPv4 address sits where the operator chose.
  if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0 && b[5] == 1) {
    return "local NAT64";
  }
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0) return "Teredo";  // 2001::/32
  // ISATAP (RFC 5214): an interface id of 0:5efe or 200:5efe carries an IPv4 address the
  // tunnel reaches, behind any prefix.
  if ((b[8] & 0xfd) == 0 && b[9] == 0 && b[10] == 0x5e && b[11] == 0xfe) return "ISATAP";
  // 100::/64, discard-only
  if (b[0] == 0x01 && std::all_of(b.begin() + 1, b.begin() + 8, [](uint8_t x) { return x == 0; })) {
    return "reserved";
  }
  return {};
}

// The address as the policy judges it: an IPv6 form of an IPv4 address as that IPv4 address.
IpAddress normalised(const IpAddress& a) {
  if (a.is_v6()) {
    if (auto v4 = embedded_v4(a.to_v6())) return *v4;
  }
  return a;
}

}  // namespace

std::string Host::to_string() const {
  if (!ip) return name;
  return ip->is_v6() ? "[" + ip->to_string() + "]" : ip->to_string();
}

std::optional<net::ip::address_v4> parse_ipv4_any(std::string_view text) {
  std::array<uint64_t, 4> parts{};
  size_t n = 0;
  while (true) {
    const size_t dot = text.find('.');
    if (n == parts.size()) return std::nullopt;
    auto v = ipv4_part(text.substr(0, dot));
    if (!v) return std::nullopt;
    parts[n++] = *v;
    if (dot == std::string_view::npos) break;
    text.remove_prefix(dot + 1);
  }
  uint32_t out = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    if (parts[i] > 255) return std::nullopt;
    out |= static_cast<uint32_t>(parts[i]) << (24 - 8 * i);
  }
  const int rest_bits = 8 * static_cast<int>(5 - n);
  if (rest_bits < 32 && parts[n - 1] >> rest_bits != 0) return std::nullopt;
  out |= static_cast<uint32_t>(parts[n - 1]);
  return net::ip::address_v4(out);
}

Result<Host> canonical_host(std::string_view text) {
  if (text.empty()) return bad_host("the host is empty");
  if (text.size() > kMaxHostText) return bad_host("the host is too long");
  Host h;
  boost::system::error_code ec;
  if (text.front() == '[') {
    if (text.back() != ']') return bad_host("an IPv6 literal must end with ]");
    const std::string inner(text.substr(1, text.size() - 2));
    if (inner.find('%') != std::string::npos) return bad_host("an IPv6 zone is not allowed");
    auto a = net::ip::make_address_v6(inner, ec);
    if (ec) return bad_host("not an IPv6 address: " + inner);
    h.ip = a;
    return h;
  }
  if (text.find(':') != std::string_view::npos) {
    const std::string s(text);
    if (s.find('%') != std::string::npos) return bad_host("an IPv6 zone is not allowed");
    auto a = net::ip::make_address_v6(s, ec);
    if (ec) return bad_host("a name cannot hold ':'");
    h.ip = a;
    return h;
  }
  std::string ascii;
  const bool plain = std::all_of(text.begin(), text.end(),
                                 [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (plain) {
    ascii.assign(text);
  } else {
    // UTS 46 mapping (which lowercases), then IDNA 2008 to punycode.
    char* out = nullptr;
    const std::string in(text);
    const int rc = idn2_to_ascii_8z(in.c_str(), &out, IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL);
    if (rc != IDN2_OK) {
      return bad_host(std::string("not a valid internationalised name: ") + idn2_strerror(rc));
    }
    ascii = out;
    idn2_free(out);
  }
  for (char& c : ascii) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c | 0x20);
  }
  if (!ascii.empty() && ascii.back() == '.') ascii.pop_back();
  if (ascii.empty()) return bad_host("the host is empty");
  if (ascii.size() > 253) return bad_host("a name is at most 253 bytes");
  std::string_view last;
  for (size_t start = 0;;) {
    const size_t dot = ascii.find('.', start);
    const size_t end = dot == std::string::npos ? ascii.size() : dot;
    const std::string_view label(ascii.data() + start, end - start);
    if (label.empty()) return bad_host("a name cannot have an empty label");
    if (label.size() > 63) return bad_host("a label is at most 63 bytes");
    for (char c : label) {
      const bool ok = (c >= 'a' && c <= 'z') || is_digit(c) || c == '-' || c == '_';
      if (!ok) return bad_host("a name holds only letters, digits, '-' and '_'");
    }
    last = label;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // As WHATWG's URL parser: a host that ends in a number is an IPv4 address or nothing.
  const bool numeric = std::all_of(last.begin(), last.end(), is_digit) ||
                       (last.size() >= 2 && last[0] == '0' && last[1] == 'x' &&
                        std::all_of(last.begin() + 2, last.end(), is_hex));
  if (numeric) {
    auto v4 = parse_ipv4_any(ascii);
    if (!v4) return bad_host("the host ends in a number but is no IPv4 address");
    h.ip = *v4;
    return h;
  }
  h.name = std::move(ascii);
  return h;
}

bool Cidr::contains(const IpAddress& raw) const {
  const IpAddress a = normalised(raw);
  if (a.is_v4() != base.is_v4()) return false;
  if (a.is_v4()) {
    const uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
    return (a.to_v4().to_uint() & mask) == base.to_v4().to_uint();
  }
  const auto x = a.to_v6().to_bytes(), y = base.to_v6().to_bytes();
  for (int i = 0; i < 16; ++i) {
    const int bits = std::clamp(prefix - 8 * i, 0, 8);
    const uint8_t mask = bits == 0 ? 0 : static_cast<uint8_t>(0xff << (8 - bits));
    if ((x[i] & mask) != y[i]) return false;
  }
  return true;
}

std::string Cidr::to_string() const { return base.to_string() + "/" + std::to_string(prefix); }

Result<Cidr> parse_cidr(std::string_view text) {
  auto bad = [&](std::string why) {
    return make_error(Errc::kInvalidArgument, "invalid_cidr", std::move(why));
  };
  if (text.empty() || text.size() > 64) return bad("expected an address or ADDRESS/PREFIX");
  const size_t slash = text.find('/');
  const std::string addr(text.substr(0, slash));
  boost::system::error_code ec;
  auto a = net::ip::make_address(addr, ec);
  if (ec || addr.find('%') != std::string::npos) return bad("not an IP address: " + addr);
  Cidr c;
  c.base = a;
  const int max = a.is_v4() ? 32 : 128;
  c.prefix = max;
  if (slash != std::string_view::npos) {
    const std::string_view p = text.substr(slash + 1);
    if (p.empty() || p.size() > 3 || !std::all_of(p.begin(), p.end(), is_digit)) {
      return bad("the prefix must be a number");
    }
    c.prefix = std::atoi(std::string(p).c_str());
    if (c.prefix > max) return bad("the prefix is at most " + std::to_string(max));
  }
  if (!c.contains(a) || normalised(a) != a) {
    return bad(std::string(text) +
               " has bits set beyond its prefix, or is an IPv6 form of IPv4 addresses (write "
               "those as IPv4)");
  }
  return c;
}

bool opened_for_host(std::string_view why) {
  return why == "host address" || why == "metadata" || why == "loopback" || why == "unspecified";
}

std::string_view always_denied(const IpAddress& raw, const Boundary& boundary) {
  const IpAddress a = normalised(raw);
  auto opened = [&](const std::vector<Cidr>& ranges) {
    return std::any_of(ranges.begin(), ranges.end(),
                       [&](const Cidr& c) { return c.contains(raw) || c.contains(a); });
  };
  // The host itself (cabind, its metrics, kubelet, ssh) and the metadata service: a range opened
  // for other networks never opens them, however wide; only one opened for the host does.
  std::string_view self;
  for (const auto& own : boundary.host_addresses) {
    if (normalised(own) == a) self = "host address";
  }
  const std::string_view kind = a.is_v4() ? classify_v4(a.to_v4()) : classify_v6(a.to_v6());
  if (opened_for_host(kind)) self = kind;
  if (!self.empty()) return opened(boundary.open_host_cidrs) ? std::string_view() : self;
  return opened(boundary.open_cidrs) ? std::string_view() : kind;
}

std::vector<IpAddress> local_addresses() {
  std::vector<IpAddress> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      out.emplace_back(net::ip::address_v4(ntohl(sin->sin_addr.s_addr)));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      net::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &sin6->sin6_addr, b.size());
      out.emplace_back(net::ip::address_v6(b));
    }
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace cabin::egress
