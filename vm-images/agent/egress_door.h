// EgressDoor: a microVM's only way out. The agent listens on the guest's 127.0.0.1 at the egress
// port, where Chromium and commands find their proxy, and hands each connection to one of the
// connections cabind keeps waiting at the agent (kEgressWaitPath). No process is spawned and no
// route is added: the bytes travel over the agent's own forwarded port.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "common/result.h"

namespace cabin::agent {

namespace net = boost::asio;

class EgressDoor {
 public:
  // Guest connections not yet taken, at most; past that the newest is closed.
  static constexpr size_t kMaxQueued = 256;

  EgressDoor(net::any_io_executor ex, uint16_t port);
  ~EgressDoor();
  EgressDoor(const EgressDoor&) = delete;
  EgressDoor& operator=(const EgressDoor&) = delete;

  // Listens on 127.0.0.1:port and accepts in the background.
  Result<void> start();
  void stop();
  uint16_t port() const { return port_; }

  // The next guest connection, or nullopt once stopped.
  net::awaitable<std::optional<net::ip::tcp::socket>> next();
  // Gives back a connection that could not be handed on, to the front of the queue.
  void give_back(net::ip::tcp::socket s);
  size_t queued() const { return queued_.size(); }

 private:
  struct Waiter;
  net::awaitable<void> accept_loop();
  // To the oldest waiter, else into the queue (at its front for one given back).
  void hand(net::ip::tcp::socket s, bool front);

  net::any_io_executor ex_;
  uint16_t port_;
  net::ip::tcp::acceptor acceptor_;
  std::deque<net::ip::tcp::socket> queued_;
  std::deque<std::shared_ptr<Waiter>> waiters_;
  bool stopped_ = false;
};

}  // namespace cabin::agent
