// The first bytes of a tunnel, read before any of them go upstream: a TLS ClientHello's server
// name, so that a tunnel opened to one host cannot carry TLS to another (domain fronting).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace cabin::egress {

// A ClientHello may come in several records; more than this is refused.
inline constexpr size_t kMaxClientHello = 16 * 1024;

struct ClientHello {
  enum class Status {
    kNeedMore,  // the bytes so far are a valid start: read more
    kDone,      // a whole ClientHello
    kInvalid,   // not TLS, not a ClientHello, malformed, or too large
  };
  Status status = Status::kNeedMore;
  std::optional<std::string> server_name;  // kDone: the host_name entry of server_name, if any
  size_t length = 0;                       // kDone: the bytes of the records that held it
  std::string error;                       // kInvalid: why
};

// Parses `bytes`, the start of the tunnel as received so far.
ClientHello parse_client_hello(std::span<const uint8_t> bytes);

}  // namespace cabin::egress
