// cabin-gateway: the stateless front of many cabind nodes (docs/scale-out.md).
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ip/address.hpp>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "common/log.h"
#include "server/gateway/gateway.h"

namespace {

using cabin::gateway::GatewayConfig;

std::string read_key_file(const std::string& path) {
  std::ifstream in(path);
  std::string key;
  std::getline(in, key);
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
  return key;
}

}  // namespace

int main(int argc, char** argv) {
  GatewayConfig c;
  CLI::App app{"cabin-gateway: routes Cabin's API to the cabind node that holds each session"};
  std::string listen = "127.0.0.1:8080";
  std::string key_file;
  int64_t poll_ms = 1000;
  app.add_option("--listen", listen, "HOST:PORT to serve on")->capture_default_str();
  app.add_option("--nodes-dns", c.nodes_dns,
                 "a name whose A/AAAA records are the nodes (a headless Service), re-resolved "
                 "every poll");
  app.add_option("--node-port", c.node_port, "the nodes' port, with --nodes-dns")
      ->capture_default_str();
  app.add_option("--node", c.nodes, "a node's HOST:PORT, instead of --nodes-dns (repeatable)");
  app.add_option("--dns", c.dns_server, "IP:PORT of the name server for --nodes-dns; default: "
                                        "/etc/resolv.conf's");
  app.add_option("--api-key-file", key_file,
                 "file with the nodes' admin key (else CABIN_API_KEY): the gateway reads each "
                 "node's load with it");
  app.add_option("--preview-domain", c.preview_domain,
                 "the nodes' --preview-domain: host-based previews are routed by their host");
  app.add_option("--poll-interval-ms", poll_ms, "how often each node is asked for its load")
      ->capture_default_str()
      ->check(CLI::Range(100, 60000));
  app.add_option("--max-connections", c.max_connections, "client connections open at once")
      ->capture_default_str();
  app.add_option("--max-connections-per-peer", c.max_connections_per_peer,
                 "client connections open at once from one address")
      ->capture_default_str();
  int64_t drain_s = 20;
  app.add_option("--drain-timeout-s", drain_s,
                 "on SIGTERM, how long open connections may go on before the gateway exits")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  std::string log_format = "text";
  app.add_option("--log-level", c.log_level)->capture_default_str();
  app.add_option("--log-format", log_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  {
    // HOST:PORT or [V6]:PORT; port 0 picks a free one.
    const size_t colon = listen.rfind(':');
    std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    boost::system::error_code ec;
    boost::asio::ip::make_address(host, ec);
    int port = -1;
    if (colon != std::string::npos) {
      const std::string p = listen.substr(colon + 1);
      auto [end, err] = std::from_chars(p.data(), p.data() + p.size(), port);
      if (err != std::errc() || end != p.data() + p.size()) port = -1;
    }
    if (ec || port < 0 || port > 65535) {
      std::cerr << "--listen: HOST:PORT with an IP address, not " << listen << "\n";
      return 2;
    }
    c.listen_host = host;
    c.listen_port = static_cast<uint16_t>(port);
  }
  c.poll_interval = std::chrono::milliseconds(poll_ms);
  c.poll_timeout = std::min(c.poll_interval, std::chrono::milliseconds(1000));
  if (c.nodes_dns.empty() == c.nodes.empty()) {
    std::cerr << "give either --nodes-dns or --node\n";
    return 2;
  }
  c.api_key = key_file.empty() ? (std::getenv("CABIN_API_KEY") ? std::getenv("CABIN_API_KEY") : "")
                               : read_key_file(key_file);
  if (c.api_key.empty()) {
    std::cerr << "the nodes' admin key is needed: --api-key-file or CABIN_API_KEY\n";
    return 2;
  }
  cabin::set_log_level(c.log_level);
  if (log_format == "json") cabin::set_log_json();
  std::signal(SIGPIPE, SIG_IGN);
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }

  boost::asio::io_context ioc(1);
  cabin::gateway::Gateway gw(ioc.get_executor(), c);
  if (auto r = gw.listen(); !r) {
    std::cerr << r.error().message << "\n";
    return 1;
  }
  boost::asio::co_spawn(ioc, gw.run(), boost::asio::detached);
  boost::asio::signal_set signals(ioc, SIGINT, SIGTERM);
  // SIGTERM (a rolling update): no new connections; those open get a while to finish (a
  // request under way, a CDP client that reconnects elsewhere when it is cut), then exit.
  signals.async_wait([&](boost::system::error_code, int sig) {
    auto log = cabin::logger("gateway");
    log->info("signal {}: draining {} connections", sig, gw.open_connections());
    gw.stop();
    boost::asio::co_spawn(
        ioc,
        [&]() -> boost::asio::awaitable<void> {
          if (!co_await gw.drain(std::chrono::steady_clock::now() + std::chrono::seconds(drain_s)))
            log->warn("{} connections still open: closing them", gw.open_connections());
          ioc.stop();
        },
        boost::asio::detached);
  });
  const std::string host =
      c.listen_host.find(':') != std::string::npos ? "[" + c.listen_host + "]" : c.listen_host;
  std::cout << "cabin-gateway listening on http://" << host << ":" << gw.port() << std::endl;
  ioc.run();
  return 0;
}
