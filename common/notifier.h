// Notifier: wakes every coroutine waiting on it; a wait primitive for one single-threaded
// io_context.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <list>
#include <memory>

namespace cabin {

namespace net = boost::asio;

// Waiters check their condition, then wait; notify_all() wakes them all to check again. Meant
// for one io_context run by one thread, so there is no gap between the check and the wait.
class Notifier {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Notifier(net::any_io_executor ex) : ex_(std::move(ex)) {}
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  void notify_all();
  // Returns true when woken by notify_all(), false when the deadline passed first.
  net::awaitable<bool> wait_until(Clock::time_point deadline);

 private:
  net::any_io_executor ex_;
  std::shared_ptr<std::list<net::steady_timer*>> waiters_ =
      std::make_shared<std::list<net::steady_timer*>>();
};

}  // namespace cabin
