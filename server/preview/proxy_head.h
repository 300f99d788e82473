// The heads the preview proxy sends: the request as the app gets it and the answer as the
// client gets it, written straight from the parsed header into one string. Hop-by-hop fields
// (RFC 9110 7.6.1, and those a Connection header names), Cabin's own cookie and the forwarding
// fields a client might forge are left out while writing, so the parsed header is never edited.
// The client's Authorization never reaches the app: it may be the API key.
#pragma once

#include <boost/beast/http/message.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cabin::preview {

namespace http = boost::beast::http;

// Every answer of a path-based preview carries this policy: the app's documents get an opaque
// origin, so on cabind's own origin they cannot read the console's storage or cookies, script
// its windows or register service workers. (A second policy the app sends only narrows it.)
inline constexpr std::string_view kPathPreviewCsp =
    "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads";

// How a body goes out.
enum class Framing {
  kNone,     // no body, or one that ends when the connection does
  kLength,   // Content-Length: length
  kChunked,  // Transfer-Encoding: chunked
};

struct UpstreamRequest {
  std::string_view target;  // what the app sees
  int port = 0;             // Host: 127.0.0.1:<port>
  std::string_view client_ip;
  std::string_view original_host;  // the Host the client sent
  bool tls = false;
  std::string_view prefix;  // path-based previews: "/preview/<id>"; empty when host-based
  const std::vector<std::string>* cookies = nullptr;  // the client's cookies, Cabin's removed
  Framing framing = Framing::kNone;
  std::uint64_t length = 0;
  bool websocket = false;
};

// Appends the request head for the app (HTTP/1.1, CRLF-terminated) to `out`.
void write_request_head(std::string& out, const http::request_header<>& h,
                        const UpstreamRequest& r);

struct ClientAnswer {
  std::string_view prefix;  // path-based: Location and cookie paths are mapped under it
  int port = 0;
  Framing framing = Framing::kNone;
  std::uint64_t length = 0;
  bool keep_alive = true;
  bool websocket = false;  // a 101 that switches the connection to WebSocket
};

// Appends the answer head for the client (HTTP/1.1) to `out`. Set-Cookie headers that would set
// Cabin's preview cookie are dropped, and the others lose their Domain; Service-Worker-Allowed
// is dropped. Path-based answers get kPathPreviewCsp.
void write_response_head(std::string& out, const http::response_header<>& h, const ClientAnswer& a);

}  // namespace cabin::preview
