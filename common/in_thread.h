// Blocking work (a large file's reads and writes) on a thread of its own, started at once, whose
// result a coroutine awaits, so that an event loop never stalls on it. The work must own what it
// touches (descriptors, buffers): the awaiting coroutine may be gone by the time it ends.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

namespace cabin {

template <typename T>
class InThread {
 public:
  template <typename Fn>
  InThread(const net::any_io_executor& ex, Fn fn) : st_(std::make_shared<State>(ex)) {
    std::thread([st = st_, fn = std::move(fn)]() mutable {
      T r = fn();
      auto exec = st->timer.get_executor();
      net::post(exec, [st = std::move(st), r = std::move(r)]() mutable {
        st->result.emplace(std::move(r));
        st->timer.cancel();
      });
    }).detach();
  }
  // What the work returned, once it has.
  net::awaitable<T> result() {
    while (!st_->result) {
      boost::system::error_code ec;
      co_await st_->timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
    co_return std::move(*st_->result);
  }

 private:
  struct State {
    explicit State(const net::any_io_executor& ex)
        : timer(ex, net::steady_timer::time_point::max()) {}
    net::steady_timer timer;  // cancelled once `result` is in
    std::optional<T> result;
  };
  std::shared_ptr<State> st_;
};

}  // namespace cabin
