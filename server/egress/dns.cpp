#include "server/egress/dns.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <limits>

#include "common/byte_reader.h"
#include "common/crypto.h"
#include "common/deadline.h"

namespace cabin::egress {
namespace {

constexpr uint16_t kClassIn = 1;
constexpr uint16_t kTypeCname = 5;

Error dns_error(std::string why) {
  return make_error(Errc::kUnavailable, "dns_failed", std::move(why));
}

// One DNS message: ByteReader, and the names in it.
class Message : public ByteReader {
 public:
  using ByteReader::ByteReader;
  size_t size() const { return b_.size(); }

  // A name at the read position, lowercased, labels joined by '.'; compression pointers must
  // point backwards, so they cannot loop.
  std::string name() {
    std::string out;
    size_t p = pos_, total = 0;
    bool jumped = false;
    while (ok_) {
      if (p >= b_.size()) break;
      const uint8_t len = b_[p];
      if ((len & 0xC0) == 0xC0) {
        if (p + 1 >= b_.size()) break;
        const size_t target = size_t{len & 0x3Fu} << 8 | b_[p + 1];
        if (target >= p) break;
        if (!jumped) pos_ = p + 2;
        jumped = true;
        p = target;
        continue;
      }
      if ((len & 0xC0) != 0) break;  // no other label types exist
      if (len == 0) {
        if (!jumped) pos_ = p + 1;
        return out;
      }
      total += len + 1u;
      if (total > 255 || p + 1 + len > b_.size()) break;
      if (!out.empty()) out += '.';
      for (size_t i = p + 1; i <= p + len; ++i) {
        char c = static_cast<char>(b_[i]);
        if (c == '.') {
          ok_ = false;
          return {};
        }
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c | 0x20);
        out += c;
      }
      p += 1 + len;
    }
    ok_ = false;
    return {};
  }
};

std::string_view rcode_name(uint32_t rcode) {
  switch (rcode) {
    case 1:
      return "FORMERR";
    case 2:
      return "SERVFAIL";
    case 4:
      return "NOTIMP";
    case 5:
      return "REFUSED";
    default:
      return "an error";
  }
}

struct Record {
  std::string owner;
  uint16_t type = 0;
  uint32_t ttl = 0;
  std::string cname;                 // type CNAME
  std::optional<IpAddress> address;  // type A or AAAA
};

}  // namespace

std::vector<uint8_t> dns_query(uint16_t id, std::string_view name, DnsType type) {
  std::vector<uint8_t> q = {
      static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  while (!name.empty()) {
    const size_t dot = name.find('.');
    const std::string_view label = name.substr(0, dot);
    q.push_back(static_cast<uint8_t>(label.size()));
    q.insert(q.end(), label.begin(), label.end());
    name = dot == std::string_view::npos ? std::string_view() : name.substr(dot + 1);
  }
  const auto t = static_cast<uint16_t>(type);
  q.insert(q.end(), {0, static_cast<uint8_t>(t >> 8), static_cast<uint8_t>(t), 0, kClassIn});
  return q;
}

Result<DnsAnswer> parse_dns_answer(std::span<const uint8_t> bytes, uint16_t id,
                                   std::string_view name, DnsType type) {
  if (bytes.size() > kMaxDnsMessage) return dns_error("the DNS answer is too large");
  Message m(bytes);
  const uint32_t got_id = m.u(2), flags = m.u(2), qd = m.u(2), an = m.u(2);
  m.u(2);  // authority records: not read
  m.u(2);  // additional records: not read
  if (!m.ok()) return dns_error("the DNS answer is shorter than its header");
  if (got_id != id) return dns_error("the DNS answer is for another query");
  if ((flags & 0x8000) == 0 || ((flags >> 11) & 0xF) != 0) {
    return dns_error("the DNS message is not an answer to a query");
  }
  DnsAnswer out;
  if (flags & 0x0200) {
    out.truncated = true;
    return out;
  }
  if (qd != 1) return dns_error("the DNS answer does not echo one question");
  const std::string qname = m.name();
  const uint32_t qtype = m.u(2), qclass = m.u(2);
  if (!m.ok()) return dns_error("the DNS answer's question is malformed");
  if (qname != name || qtype != static_cast<uint16_t>(type) || qclass != kClassIn) {
    return dns_error("the DNS answer is for another question");
  }
  const uint32_t rcode = flags & 0xF;
  if (rcode == 3) {
    out.no_such_name = true;
    return out;
  }
  if (rcode != 0) return dns_error("the name server answered " + std::string(rcode_name(rcode)));
  std::vector<Record> records;
  for (uint32_t i = 0; i < an; ++i) {
    Record r;
    r.owner = m.name();
    r.type = static_cast<uint16_t>(m.u(2));
    const uint32_t rclass = m.u(2);
    r.ttl = m.u(4);
    const uint32_t rdlen = m.u(2);
    const size_t rdata_at = m.pos();
    auto rdata = m.take(rdlen);
    if (!m.ok()) return dns_error("a DNS answer record is malformed");
    if (rclass != kClassIn) continue;
    if (r.type == kTypeCname) {
      Message target(bytes);
      target.take(rdata_at);
      r.cname = target.name();
      if (!target.ok() || target.pos() != rdata_at + rdlen) {
        return dns_error("a CNAME record is malformed");
      }
    } else if (r.type == static_cast<uint16_t>(DnsType::kA)) {
      if (rdlen != 4) return dns_error("an A record is not 4 bytes");
      r.address = net::ip::address_v4({rdata[0], rdata[1], rdata[2], rdata[3]});
    } else if (r.type == static_cast<uint16_t>(DnsType::kAaaa)) {
      if (rdlen != 16) return dns_error("an AAAA record is not 16 bytes");
      net::ip::address_v6::bytes_type b;
      std::copy(rdata.begin(), rdata.end(), b.begin());
      r.address = net::ip::address_v6(b);
    } else {
      continue;
    }
    records.push_back(std::move(r));
  }
  std::string current(name);
  uint32_t ttl = std::numeric_limits<uint32_t>::max();
  for (int hops = 0;; ++hops) {
    auto alias = std::find_if(records.begin(), records.end(), [&](const Record& r) {
      return r.type == kTypeCname && r.owner == current;
    });
    if (alias == records.end()) break;
    if (hops == kMaxCnameHops) return dns_error("the CNAME chain is too long");
    current = alias->cname;
    ttl = std::min(ttl, alias->ttl);
  }
  for (const auto& r : records) {
    if (r.address && r.type == static_cast<uint16_t>(type) && r.owner == current) {
      out.addresses.push_back(*r.address);
      ttl = std::min(ttl, r.ttl);
    }
  }
  out.ttl = out.addresses.empty() ? 0 : ttl;
  return out;
}

std::vector<net::ip::udp::endpoint> system_name_servers() {
  std::ifstream in("/etc/resolv.conf");
  std::stringstream text;
  text << in.rdbuf();
  return resolv_conf_servers(text.str());
}

std::vector<net::ip::udp::endpoint> resolv_conf_servers(std::string_view text) {
  std::vector<net::ip::udp::endpoint> out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    constexpr std::string_view kKey = "nameserver";
    if (line.substr(0, kKey.size()) != kKey) continue;
    line.remove_prefix(kKey.size());
    if (line.empty() || (line.front() != ' ' && line.front() != '\t')) continue;
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    const size_t end = line.find_first_of(" \t\r#;");
    const std::string addr(line.substr(0, end));
    boost::system::error_code ec;
    auto a = net::ip::make_address(addr, ec);
    if (ec || addr.find('%') != std::string::npos) continue;
    out.emplace_back(a, 53);
  }
  return out;
}

net::awaitable<Result<DnsAnswer>> Resolver::ask(std::string name, DnsType type) const {
  auto ex = co_await net::this_coro::executor;
  std::string last_error = "no DNS server is configured";
  for (const auto& server : config_.servers) {
    const std::string r = random_bytes(2);
    const uint16_t id =
        static_cast<uint16_t>(static_cast<uint8_t>(r[0]) << 8 | static_cast<uint8_t>(r[1]));
    const auto query = dns_query(id, name, type);
    const std::string where = server.address().to_string() + ":" + std::to_string(server.port());
    boost::system::error_code ec;
    net::ip::udp::socket udp(ex);
    udp.open(server.protocol(), ec);
    if (!ec) udp.connect(server, ec);
    if (ec) {
      last_error = "DNS server " + where + ": " + ec.message();
      continue;
    }
    std::vector<uint8_t> buf(kMaxDnsMessage);
    Result<DnsAnswer> answer = dns_error("DNS server " + where + " did not answer in time");
    {
      Deadline deadline(udp, config_.timeout);
      co_await udp.async_send(net::buffer(query), net::redirect_error(net::use_awaitable, ec));
      while (!ec) {
        const size_t n = co_await udp.async_receive(net::buffer(buf),
                                                    net::redirect_error(net::use_awaitable, ec));
        if (ec) break;
        // A datagram for another query (a late answer, or a forgery) is not the answer.
        if (n < 2 || (buf[0] << 8 | buf[1]) != id) continue;
        answer = parse_dns_answer(std::span<const uint8_t>(buf.data(), n), id, name, type);
        break;
      }
      if (ec && !deadline.expired())
        answer = dns_error("DNS server " + where + ": " + ec.message());
    }
    if (answer && answer->truncated) {
      // The whole answer over TCP, with its two-byte length.
      net::ip::tcp::socket tcp(ex);
      Deadline deadline(tcp, config_.timeout);
      const net::ip::tcp::endpoint tcp_server(server.address(), server.port());
      co_await tcp.async_connect(tcp_server, net::redirect_error(net::use_awaitable, ec));
      std::vector<uint8_t> framed(2 + query.size());
      framed[0] = static_cast<uint8_t>(query.size() >> 8);
      framed[1] = static_cast<uint8_t>(query.size());
      std::copy(query.begin(), query.end(), framed.begin() + 2);
      if (!ec) {
        co_await net::async_write(tcp, net::buffer(framed),
                                  net::redirect_error(net::use_awaitable, ec));
      }
      std::array<uint8_t, 2> len{};
      if (!ec) {
        co_await net::async_read(tcp, net::buffer(len),
                                 net::redirect_error(net::use_awaitable, ec));
      }
      const size_t n = size_t{len[0]} << 8 | len[1];
      if (!ec) {
        co_await net::async_read(tcp, net::buffer(buf.data(), n),
                                 net::redirect_error(net::use_awaitable, ec));
      }
      answer = ec ? dns_error("DNS server " + where + " over TCP: " + ec.message())
                  : parse_dns_answer(std::span<const uint8_t>(buf.data(), n), id, name, type);
      if (answer && answer->truncated) answer = dns_error("a truncated DNS answer over TCP");
    }
    if (answer) co_return answer;
    last_error = answer.error().message;
  }
  co_return dns_error(last_error);
}

net::awaitable<Result<std::vector<IpAddress>>> Resolver::resolve(std::string name) const {
  if (auto pin = config_.pinned.find(name); pin != config_.pinned.end()) co_return pin->second;
  std::vector<IpAddress> out;
  bool no_such_name = true;
  std::string error;
  for (DnsType type : {DnsType::kA, DnsType::kAaaa}) {
    auto a = co_await ask(name, type);
    if (!a) {
      error = a.error().message;
      no_such_name = false;
      continue;
    }
    no_such_name = no_such_name && a->no_such_name;
    out.insert(out.end(), a->addresses.begin(), a->addresses.end());
  }
  if (!out.empty()) co_return out;
  if (!error.empty()) co_return dns_error(error);
  if (no_such_name) co_return dns_error(name + ": no such name");
  co_return dns_error(name + " has no address");
}

}  // namespace cabin::egress
