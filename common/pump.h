// Byte pump: copies two streams into each other until both directions end; no parsing, backpressure
// by awaiting each write before the next read.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <memory>

#include "common/byte_count.h"

namespace cabin {

namespace net = boost::asio;

inline constexpr size_t kPumpBufferSize = 64 * 1024;

namespace detail {

template <typename From, typename To>
net::awaitable<void> copy_one_way(From& from, To& to, bool& failed, ShardedCount* counted) {
  std::array<char, kPumpBufferSize> buf;
  boost::system::error_code ec;
  for (;;) {
    size_t n = co_await from.async_read_some(net::buffer(buf),
                                             net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    co_await net::async_write(to, net::buffer(buf.data(), n),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    count_bytes(counted, n);
  }
  if (ec == net::error::eof && !failed) {
    // Half-close: the peer sees EOF and the other direction may still finish.
    to.shutdown(net::socket_base::shutdown_send, ec);
  } else {
    // An error ends both directions at once.
    failed = true;
    from.close(ec);
    to.close(ec);
  }
}

}  // namespace detail

// Pumps until both directions have ended; closes both streams before returning. `counts.up`
// counts what goes from `a` to `b`, `counts.down` the other way.
template <typename A, typename B>
net::awaitable<void> pump(A a, B b, RelayCounts counts = {}) {
  struct State {
    A a;
    B b;
    bool failed = false;
    bool other_done = false;
    net::steady_timer done;
    State(A&& a_, B&& b_) : a(std::move(a_)), b(std::move(b_)), done(a.get_executor()) {
      done.expires_at(net::steady_timer::time_point::max());
    }
  };
  auto st = std::make_shared<State>(std::move(a), std::move(b));
  net::co_spawn(
      st->a.get_executor(),
      [st, down = counts.down]() -> net::awaitable<void> {
        co_await detail::copy_one_way(st->b, st->a, st->failed, down);
      },
      [st](std::exception_ptr) {
        st->other_done = true;
        st->done.cancel();
      });
  co_await detail::copy_one_way(st->a, st->b, st->failed, counts.up);
  if (!st->other_done) {
    boost::system::error_code ec;
    co_await st->done.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  boost::system::error_code ec;
  st->a.close(ec);
  st->b.close(ec);
}

}  // namespace cabin
