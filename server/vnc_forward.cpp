#include "server/vnc_forward.h"

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <unistd.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <span>
#include <sstream>

#include "common/log.h"
#include "common/spawn.h"
#include "server/api/ids.h"
#include "server/config.h"
#include "server/http/client_stream.h"
#include "server/http/websocket.h"
#include "vnc/rfb_bridge_link.h"

namespace cabin {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace ssl = net::ssl;
namespace websocket = boost::beast::websocket;
using Ws = http_api::WebSocket;

struct ServerUrl {
  bool tls = false;
  std::string host;
  uint16_t port = 80;
};

// http://HOST[:PORT][/] or https://HOST[:PORT][/] (then the WebSocket is wss).
Result<ServerUrl> parse_server_url(std::string_view url) {
  ServerUrl out;
  if (url.substr(0, 8) == "https://") {
    out.tls = true;
    out.port = 443;
    url.remove_prefix(8);
  } else if (url.substr(0, 7) == "http://") {
    url.remove_prefix(7);
  } else {
    return make_error(Errc::kInvalidArgument, "bad_url",
                      "--server must be an http:// or https:// URL");
  }
  while (!url.empty() && url.back() == '/') url.remove_suffix(1);
  if (url.empty() || url.find('/') != std::string_view::npos) {
    return make_error(Errc::kInvalidArgument, "bad_url",
                      "--server must be http(s)://HOST[:PORT]");
  }
  size_t colon = url.rfind(':');
  std::string_view host = url;
  if (colon != std::string_view::npos && url.find(']', colon) == std::string_view::npos) {
    host = url.substr(0, colon);
    std::string_view p = url.substr(colon + 1);
    unsigned v = 0;
    if (p.empty() || p.size() > 5) return make_error(Errc::kInvalidArgument, "bad_url", "bad port");
    for (char c : p) {
      if (c < '0' || c > '9') return make_error(Errc::kInvalidArgument, "bad_url", "bad port");
      v = v * 10 + static_cast<unsigned>(c - '0');
    }
    if (v == 0 || v > 65535) return make_error(Errc::kInvalidArgument, "bad_url", "bad port");
    out.port = static_cast<uint16_t>(v);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) return make_error(Errc::kInvalidArgument, "bad_url", "--server lacks a host");
  out.host = std::string(host);
  return out;
}

// A WebSocket to the server's `target` with `Authorization: Bearer key` and the binary
// subprotocol; over TLS when `tls` is set, checking the certificate and its name.
net::awaitable<Result<Ws>> dial(const ServerUrl& server, std::string target, std::string key,
                                ssl::context* tls) {
  auto ex = co_await net::this_coro::executor;
  const std::string where = server.host + ":" + std::to_string(server.port);
  boost::system::error_code ec;
  tcp::resolver resolver(ex);
  auto endpoints = co_await resolver.async_resolve(server.host, std::to_string(server.port),
                                                   net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return make_error(Errc::kUnavailable, "resolve_failed", server.host + ": " + ec.message());
  boost::beast::tcp_stream stream(ex);
  stream.expires_after(vnc::bridge_detail::kHandshakeTimeout);
  co_await stream.async_connect(endpoints, net::redirect_error(net::use_awaitable, ec));
  if (ec)
    co_return make_error(Errc::kUnavailable, "connect_failed",
                         "cannot connect to " + where + ": " + ec.message());
  stream.socket().set_option(tcp::no_delay(true), ec);
  std::optional<http_api::ClientStream> conn;
  if (tls) {
    auto s = std::make_unique<http_api::ClientStream::Tls>(std::move(stream), *tls);
    boost::system::error_code not_ip;
    (void)net::ip::make_address(server.host, not_ip);
    // SNI for names only (RFC 6066); the certificate must name the host either way.
    if (not_ip) SSL_set_tlsext_host_name(s->native_handle(), server.host.c_str());
    s->set_verify_callback(ssl::host_name_verification(server.host));
    co_await s->async_handshake(ssl::stream_base::client,
                                net::redirect_error(net::use_awaitable, ec));
    if (ec)
      co_return make_error(Errc::kUnavailable, "tls_failed",
                           "TLS with " + where + ": " + ec.message());
    s->next_layer().expires_never();
    conn.emplace(std::move(s));
  } else {
    stream.expires_never();
    conn.emplace(std::move(stream));
  }
  Ws ws(std::move(*conn));
  websocket::stream_base::timeout t{};
  t.handshake_timeout = vnc::bridge_detail::kHandshakeTimeout;
  t.idle_timeout = vnc::bridge_detail::kIdleTimeout;
  t.keep_alive_pings = true;
  ws.set_option(t);
  ws.set_option(
      websocket::stream_base::decorator([key = std::move(key)](websocket::request_type& req) {
        req.set(boost::beast::http::field::authorization, "Bearer " + key);
        req.set(boost::beast::http::field::sec_websocket_protocol, vnc::kRfbSubprotocol);
      }));
  ws.read_message_max(vnc::kMaxWsMessage * 16);  // server-to-client updates can be large
  ws.binary(true);
  ws.auto_fragment(false);
  websocket::response_type res;
  co_await ws.async_handshake(res, where, target, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    std::string detail =
        res.result_int() != 0 ? "HTTP " + std::to_string(res.result_int()) : ec.message();
    if (!res.body().empty()) detail += ": " + res.body().substr(0, 512);
    co_return make_error(Errc::kUnavailable, "upgrade_refused", "the server refused: " + detail);
  }
  co_return std::move(ws);
}

std::string read_text(const char* path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Who opened the connection `client` came in on: its socket is the one from client's remote end
// to its local end.
std::optional<uint32_t> peer_uid(const tcp::socket& client) {
  boost::system::error_code ec;
  const auto ours = client.local_endpoint(ec);
  if (ec) return std::nullopt;
  const auto theirs = client.remote_endpoint(ec);
  if (ec) return std::nullopt;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    if (auto uid = tcp_socket_owner(read_text(table), theirs, ours)) return uid;
  }
  return std::nullopt;
}

net::awaitable<void> serve_one(tcp::socket client, ServerUrl server, std::string target,
                               std::string key, std::shared_ptr<ssl::context> tls) {
  auto log = logger("vnc-forward");
  // The forwarder holds the API key: only its own user may use it.
  const auto uid = peer_uid(client);
  if (!uid || *uid != ::geteuid()) {
    log->warn("refused a connection from {}", uid ? "uid " + std::to_string(*uid) : "an unknown uid");
    boost::system::error_code ec;
    client.close(ec);
    co_return;
  }
  auto ws = co_await dial(server, target, key, tls.get());
  if (!ws) {
    log->error("{}", ws.error().message);
    boost::system::error_code ec;
    client.close(ec);
    co_return;
  }
  log->info("viewer connected");
  boost::system::error_code ec;
  client.set_option(tcp::no_delay(true), ec);
  // The WebSocket is the server here and the TCP connection the native client: bytes pass
  // unchanged both ways (cabind filters what the client sends).
  auto l = std::make_shared<vnc::bridge_detail::Link<Ws, tcp::socket>>(std::move(*ws),
                                                                        std::move(client));
  co_await vnc::bridge_detail::run_link(
      l, std::string(),
      [](std::span<const uint8_t> in, std::string& out) -> Result<void> {
        out.append(reinterpret_cast<const char*>(in.data()), in.size());
        return {};
      },
      std::function<void()>());
  log->info("viewer disconnected");
}

// One end as /proc/net/tcp{,6} prints it: "0100007F:1F90" (v4) or 32 hex digits (v6). The
// address words are the kernel's in-memory bytes printed as native integers.
struct TcpEnd {
  std::array<uint8_t, 16> addr{};  // v4 as ::ffff:a.b.c.d
  uint16_t port = 0;
  bool operator==(const TcpEnd&) const = default;
};

std::optional<TcpEnd> parse_proc_end(std::string_view field) {
  const size_t colon = field.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view hex = field.substr(0, colon), port = field.substr(colon + 1);
  if (hex.size() != 8 && hex.size() != 32) return std::nullopt;
  TcpEnd e;
  std::array<uint8_t, 16> raw{};
  for (size_t w = 0; w < hex.size() / 8; ++w) {
    uint32_t v = 0;
    auto [p, ec] = std::from_chars(hex.data() + 8 * w, hex.data() + 8 * w + 8, v, 16);
    if (ec != std::errc() || p != hex.data() + 8 * w + 8) return std::nullopt;
    std::memcpy(raw.data() + 4 * w, &v, 4);
  }
  if (hex.size() == 8) {
    e.addr[10] = e.addr[11] = 0xff;
    std::memcpy(e.addr.data() + 12, raw.data(), 4);
  } else {
    e.addr = raw;
  }
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), e.port, 16);
  if (ec != std::errc() || p != port.data() + port.size()) return std::nullopt;
  return e;
}

TcpEnd end_of(const tcp::endpoint& ep) {
  TcpEnd e;
  e.port = ep.port();
  if (ep.address().is_v4()) {
    auto b = ep.address().to_v4().to_bytes();
    e.addr[10] = e.addr[11] = 0xff;
    std::memcpy(e.addr.data() + 12, b.data(), 4);
  } else {
    e.addr = ep.address().to_v6().to_bytes();
  }
  return e;
}

}  // namespace

std::optional<uint32_t> tcp_socket_owner(std::string_view table, const tcp::endpoint& local,
                                         const tcp::endpoint& remote) {
  const TcpEnd want_local = end_of(local), want_remote = end_of(remote);
  std::istringstream in{std::string(table)};
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, loc, rem, state, queues, timer, retransmits, uid;
    if (!(f >> sl >> loc >> rem >> state >> queues >> timer >> retransmits >> uid)) continue;
    if (state != "01") continue;  // ESTABLISHED: a TIME_WAIT entry shows uid 0
    auto l = parse_proc_end(loc), r = parse_proc_end(rem);
    if (!l || !r || *l != want_local || *r != want_remote) continue;
    uint32_t v = 0;
    auto [p, ec] = std::from_chars(uid.data(), uid.data() + uid.size(), v);
    if (ec == std::errc() && p == uid.data() + uid.size()) return v;
  }
  return std::nullopt;
}

int run_vnc_forward(int argc, char** argv) {
  auto parsed = parse_vnc_forward_config(argc, argv);
  if (parsed.exit) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  const VncForwardConfig& cfg = parsed.config;
  const std::string& session = cfg.session;
  const std::string& ca_file = cfg.ca_file;
  const int port = cfg.port;
  set_log_level(cfg.log_level);
  auto log = logger("vnc-forward");
  if (!api::valid_session_id(session)) {
    std::cerr << "SESSION must be a session id (ses_ and 20 lowercase letters or digits)\n";
    return 2;
  }
  auto server = parse_server_url(cfg.server);
  if (!server) {
    std::cerr << server.error().message << "\n";
    return 2;
  }
  const char* key = std::getenv("CABIN_API_KEY");
  if (key == nullptr || *key == '\0') {
    std::cerr << "CABIN_API_KEY must hold the API key\n";
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);

  std::shared_ptr<ssl::context> tls;
  if (server->tls) {
    tls = std::make_shared<ssl::context>(ssl::context::tls_client);
    tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                     ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    tls->set_verify_mode(ssl::verify_peer);
    boost::system::error_code tec;
    if (ca_file.empty()) {
      tls->set_default_verify_paths(tec);
    } else {
      tls->load_verify_file(ca_file, tec);
    }
    if (tec) {
      std::cerr << "cannot load trusted certificates: " << tec.message() << "\n";
      return 2;
    }
  } else if (!ca_file.empty()) {
    std::cerr << "--ca-file needs an https:// server\n";
    return 2;
  }

  net::io_context ioc(1);
  tcp::acceptor acceptor(ioc);
  boost::system::error_code ec;
  const tcp::endpoint ep(net::ip::address_v4::loopback(), static_cast<uint16_t>(port));
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    std::cerr << "cannot listen on 127.0.0.1:" << port << ": " << ec.message() << "\n";
    return 1;
  }
  // The first line says where to point the VNC client; tests read it.
  std::cout << "forwarding 127.0.0.1:" << acceptor.local_endpoint().port() << " to session "
            << session << "\n"
            << std::flush;

  const std::string target = "/v1/sessions/" + session + "/vnc";
  cabin::spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        for (;;) {
          tcp::socket client(ioc);
          boost::system::error_code aec;
          co_await acceptor.async_accept(client, net::redirect_error(net::use_awaitable, aec));
          if (aec == net::error::operation_aborted) co_return;
          if (aec) continue;
          cabin::spawn(ioc, serve_one(std::move(client), *server, target, key, tls),
                       "vnc-forward connection");
        }
      },
      "vnc-forward listener");
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code, int) { ioc.stop(); });
  ioc.run();
  return 0;
}

}  // namespace cabin
