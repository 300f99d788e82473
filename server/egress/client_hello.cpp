#include "server/egress/client_hello.h"

#include <vector>

#include "common/byte_reader.h"

namespace cabin::egress {
namespace {

constexpr uint8_t kHandshakeRecord = 22;
constexpr uint8_t kClientHelloType = 1;
constexpr uint16_t kServerNameExtension = 0;
constexpr size_t kMaxRecord = 16 * 1024 + 256;  // TLSPlaintext limit, with slack for TLS 1.0

ClientHello invalid(std::string why) {
  ClientHello h;
  h.status = ClientHello::Status::kInvalid;
  h.error = std::move(why);
  return h;
}

using Reader = ByteReader;

// The ClientHello body (after its 4-byte handshake header).
ClientHello parse_body(std::span<const uint8_t> body) {
  Reader r(body);
  const uint32_t version = r.u(2);
  if (r.ok() && (version >> 8) != 3) return invalid("not a TLS ClientHello version");
  r.take(32);  // random
  const uint32_t session_id = r.u(1);
  if (session_id > 32) return invalid("session id longer than 32 bytes");
  r.take(session_id);
  const uint32_t suites = r.u(2);
  if (suites < 2 || suites % 2 != 0) return invalid("bad cipher suite list");
  r.take(suites);
  const uint32_t compression = r.u(1);
  if (compression < 1) return invalid("bad compression method list");
  r.take(compression);
  if (!r.ok()) return invalid("truncated ClientHello");
  ClientHello out;
  out.status = ClientHello::Status::kDone;
  if (r.left() == 0) return out;  // no extensions
  const uint32_t ext_len = r.u(2);
  if (!r.ok() || ext_len != r.left()) return invalid("the extensions do not fill the ClientHello");
  bool seen_sni = false;
  while (r.left() > 0) {
    const uint32_t type = r.u(2);
    const uint32_t len = r.u(2);
    auto data = r.take(len);
    if (!r.ok()) return invalid("truncated extension");
    if (type != kServerNameExtension) continue;
    if (seen_sni) return invalid("two server_name extensions");
    seen_sni = true;
    Reader s(data);
    const uint32_t list_len = s.u(2);
    if (!s.ok() || list_len != s.left() || list_len == 0) return invalid("bad server_name list");
    while (s.left() > 0) {
      const uint32_t name_type = s.u(1);
      const uint32_t name_len = s.u(2);
      auto name = s.take(name_len);
      if (!s.ok()) return invalid("truncated server_name");
      if (name_type != 0) continue;  // only host_name (0) is defined
      if (out.server_name) return invalid("two host names in server_name");
      if (name_len == 0 || name_len > 255) return invalid("bad host name length in server_name");
      for (uint8_t c : name) {
        if (c <= 0x20 || c >= 0x7f) return invalid("server_name holds a byte no host name has");
      }
      out.server_name = std::string(name.begin(), name.end());
    }
  }
  return out;
}

}  // namespace

ClientHello parse_client_hello(std::span<const uint8_t> bytes) {
  // The handshake message, gathered from the fragments of consecutive records.
  std::vector<uint8_t> message;
  size_t pos = 0;
  while (true) {
    if (message.size() >= 4) {
      if (message[0] != kClientHelloType)
        return invalid("the first handshake message is not a ClientHello");
      const size_t len = size_t{message[1]} << 16 | size_t{message[2]} << 8 | message[3];
      if (len > kMaxClientHello) return invalid("the ClientHello is larger than 16 KiB");
      if (message.size() >= 4 + len) {
        if (message.size() > 4 + len) return invalid("bytes after the ClientHello in its record");
        auto hello = parse_body(std::span<const uint8_t>(message).subspan(4, len));
        hello.length = pos;
        return hello;
      }
    }
    if (bytes.size() - pos < 5) {
      // A valid start so far? Check what there is of the next record's header.
      if (pos < bytes.size() && bytes[pos] != kHandshakeRecord)
        return invalid("not a TLS handshake record");
      if (bytes.size() - pos >= 2 && bytes[pos + 1] != 3)
        return invalid("not a TLS record version");
      return ClientHello{};
    }
    if (bytes[pos] != kHandshakeRecord) return invalid("not a TLS handshake record");
    if (bytes[pos + 1] != 3 || bytes[pos + 2] > 4) return invalid("not a TLS record version");
    const size_t len = size_t{bytes[pos + 3]} << 8 | bytes[pos + 4];
    if (len == 0 || len > kMaxRecord) return invalid("bad TLS record length");
    if (bytes.size() - pos - 5 < len) return ClientHello{};
    if (message.size() + len > kMaxClientHello + 4)
      return invalid("the ClientHello is larger than 16 KiB");
    message.insert(message.end(), bytes.begin() + static_cast<std::ptrdiff_t>(pos + 5),
                   bytes.begin() + static_cast<std::ptrdiff_t>(pos + 5 + len));
    pos += 5 + len;
  }
}

}  // namespace cabin::egress
