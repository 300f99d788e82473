#include "vm-images/agent/tunnel.h"

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <memory>

#include "common/notifier.h"
#include "common/spawn.h"

namespace cabin::agent {
namespace {

using tcp = net::ip::tcp;
using Clock = Notifier::Clock;

// 64 KiB per direction: one CDP screenshot frame is often larger than 16 KiB.
constexpr size_t kPumpBuffer = 64 * 1024;

struct TunnelState {
  TunnelState(net::generic::stream_protocol::socket c, tcp::socket u)
      : client(std::move(c)), upstream(std::move(u)), changed(client.get_executor()) {}
  void close_both() {
    boost::system::error_code ignored;
    client.close(ignored);
    upstream.close(ignored);
  }
  net::generic::stream_protocol::socket client;
  tcp::socket upstream;
  Notifier changed;
  int running = 0;
};

// One direction. A write completes before the next read starts, so a slow reader slows the
// writer instead of filling memory.
template <typename From, typename To>
net::awaitable<void> pump(std::shared_ptr<TunnelState> st, From& from, To& to, std::string first) {
  boost::system::error_code ec;
  if (!first.empty()) {
    co_await net::async_write(to, net::buffer(first), net::redirect_error(net::use_awaitable, ec));
  }
  auto buf = std::make_unique<std::array<char, kPumpBuffer>>();
  while (!ec) {
    size_t n = co_await from.async_read_some(net::buffer(*buf),
                                             net::redirect_error(net::use_awaitable, ec));
    if (n > 0) {
      boost::system::error_code wec;
      co_await net::async_write(to, net::buffer(buf->data(), n),
                                net::redirect_error(net::use_awaitable, wec));
      if (wec) {
        ec = wec;
        break;
      }
    }
  }
  if (ec == net::error::eof) {
    boost::system::error_code ignored;
    to.shutdown(net::socket_base::shutdown_send, ignored);
  } else {
    st->close_both();
  }
  --st->running;
  st->changed.notify_all();
}

}  // namespace

net::awaitable<Result<tcp::socket>> connect_loopback(ConnectTarget target) {
  auto ex = co_await net::this_coro::executor;
  std::vector<tcp::endpoint> candidates;
  switch (target.host) {
    case ConnectTarget::Host::kIpv4Loopback:
      candidates.emplace_back(net::ip::address_v4::loopback(), target.port);
      break;
    case ConnectTarget::Host::kIpv6Loopback:
      candidates.emplace_back(net::ip::address_v6::loopback(), target.port);
      break;
    case ConnectTarget::Host::kLocalhost:
      candidates.emplace_back(net::ip::address_v4::loopback(), target.port);
      candidates.emplace_back(net::ip::address_v6::loopback(), target.port);
      break;
  }
  boost::system::error_code ec;
  for (const auto& ep : candidates) {
    tcp::socket s(ex);
    co_await s.async_connect(ep, net::redirect_error(net::use_awaitable, ec));
    if (!ec) {
      s.set_option(tcp::no_delay(true), ec);
      co_return std::move(s);
    }
  }
  co_return make_error(
      Errc::kBadGateway, "connect_failed",
      "cannot connect to loopback port " + std::to_string(target.port) + ": " + ec.message());
}

net::awaitable<void> run_tunnel(net::generic::stream_protocol::socket client, tcp::socket upstream,
                                std::string prefetched) {
  auto st = std::make_shared<TunnelState>(std::move(client), std::move(upstream));
  st->running = 2;
  auto ex = co_await net::this_coro::executor;
  cabin::spawn(ex, pump(st, st->upstream, st->client, std::string()), "tunnel upstream to client");
  co_await pump(st, st->client, st->upstream, std::move(prefetched));
  while (st->running > 0) co_await st->changed.wait_until(Clock::time_point::max());
  st->close_both();
}

}  // namespace cabin::agent
