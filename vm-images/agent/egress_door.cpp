#include "vm-images/agent/egress_door.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/log.h"

namespace cabin::agent {

using tcp = net::ip::tcp;

struct EgressDoor::Waiter {
  explicit Waiter(const net::any_io_executor& ex)
      : timer(ex, net::steady_timer::time_point::max()) {}
  net::steady_timer timer;
  std::optional<tcp::socket> got;
};

EgressDoor::EgressDoor(net::any_io_executor ex, uint16_t port)
    : ex_(ex), port_(port), acceptor_(ex) {}

EgressDoor::~EgressDoor() { stop(); }

Result<void> EgressDoor::start() {
  boost::system::error_code ec;
  const tcp::endpoint at(net::ip::address_v4::loopback(), port_);
  acceptor_.open(at.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(at, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return make_error(Errc::kUnavailable, "listen_failed",
                      "egress port 127.0.0.1:" + std::to_string(port_) + ": " + ec.message());
  }
  port_ = acceptor_.local_endpoint().port();  // 0 picks one (tests)
  net::co_spawn(ex_, accept_loop(), net::detached);
  return {};
}

void EgressDoor::stop() {
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  for (auto& w : waiters_) w->timer.cancel();
  waiters_.clear();
  queued_.clear();
}

net::awaitable<void> EgressDoor::accept_loop() {
  boost::system::error_code ec;
  while (!stopped_) {
    tcp::socket s = co_await acceptor_.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec == net::error::operation_aborted || stopped_) break;
    if (ec) continue;
    s.set_option(tcp::no_delay(true), ec);
    hand(std::move(s), false);
  }
}

void EgressDoor::hand(tcp::socket s, bool front) {
  if (stopped_) return;
  if (!waiters_.empty()) {
    auto w = waiters_.front();
    waiters_.pop_front();
    w->got.emplace(std::move(s));
    w->timer.cancel();
    return;
  }
  if (!front && queued_.size() >= kMaxQueued) {
    logger("agent.egress")->warn("{} guest connections wait for cabind: closing one", kMaxQueued);
    return;  // closed as it goes
  }
  if (front) {
    queued_.push_front(std::move(s));
  } else {
    queued_.push_back(std::move(s));
  }
}

net::awaitable<std::optional<tcp::socket>> EgressDoor::next() {
  if (!queued_.empty()) {
    tcp::socket s = std::move(queued_.front());
    queued_.pop_front();
    co_return std::optional<tcp::socket>(std::move(s));
  }
  if (stopped_) co_return std::nullopt;
  auto w = std::make_shared<Waiter>(ex_);
  waiters_.push_back(w);
  boost::system::error_code ec;
  co_await w->timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  co_return std::move(w->got);
}

void EgressDoor::give_back(tcp::socket s) { hand(std::move(s), true); }

}  // namespace cabin::agent
