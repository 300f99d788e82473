#include "server/vnc_forward.h"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <csignal>
#include <cstdlib>
#include <iostream>

#include "common/log.h"
#include "server/api/ids.h"
#include "vnc/rfb_bridge.h"

namespace cabin {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

struct ServerUrl {
  std::string host;
  uint16_t port = 80;
};

// http://HOST[:PORT][/] only: the forwarder speaks plain WebSocket to cabind.
Result<ServerUrl> parse_server_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return make_error(Errc::kInvalidArgument, "bad_url", "--server must be an http:// URL");
  }
  url.remove_prefix(kScheme.size());
  while (!url.empty() && url.back() == '/') url.remove_suffix(1);
  if (url.empty() || url.find('/') != std::string_view::npos) {
    return make_error(Errc::kInvalidArgument, "bad_url", "--server must be http://HOST[:PORT]");
  }
  ServerUrl out;
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

net::awaitable<void> serve_one(tcp::socket client, ServerUrl server, std::string target,
                               std::string key) {
  auto log = logger("vnc-forward");
  auto ws = co_await vnc::dial_rfb_websocket(server.host, server.port, target, key);
  if (!ws) {
    log->error("{}", ws.error().message);
    boost::system::error_code ec;
    client.close(ec);
    co_return;
  }
  log->info("viewer connected");
  co_await vnc::forward_rfb(std::move(client), std::move(*ws));
  log->info("viewer disconnected");
}

}  // namespace

int run_vnc_forward(int argc, char** argv) {
  CLI::App app{
      "cabind vnc-forward: listens on 127.0.0.1 and carries a native VNC client's connection to "
      "a session's screen over cabind's authenticated WebSocket (API key from CABIN_API_KEY)"};
  app.name("cabind vnc-forward");
  std::string session;
  std::string server_text = "http://127.0.0.1:8080";
  int port = 5900;
  std::string log_level = "info";
  app.add_option("SESSION", session, "session id (ses_...)")->required();
  app.add_option("--server", server_text, "cabind's URL")->envname("CABIN_SERVER");
  app.add_option("--port", port, "local port on 127.0.0.1 (0: any free one)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  set_log_level(log_level);
  auto log = logger("vnc-forward");
  if (!api::valid_session_id(session)) {
    std::cerr << "SESSION must be a session id (ses_ and 20 lowercase letters or digits)\n";
    return 2;
  }
  auto server = parse_server_url(server_text);
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
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        for (;;) {
          tcp::socket client(ioc);
          boost::system::error_code aec;
          co_await acceptor.async_accept(client, net::redirect_error(net::use_awaitable, aec));
          if (aec == net::error::operation_aborted) co_return;
          if (aec) continue;
          net::co_spawn(ioc, serve_one(std::move(client), *server, target, key), net::detached);
        }
      },
      net::detached);
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code, int) { ioc.stop(); });
  ioc.run();
  return 0;
}

}  // namespace cabin
