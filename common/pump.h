// Byte pump: copies two streams into each other until both directions end; backpressure by
// awaiting each write before the next read. pump() parses nothing; pump_websocket() only finds
// where the server's frames end.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "common/byte_count.h"
#include "common/ws_frames.h"

namespace cabin {

namespace net = boost::asio;

inline constexpr size_t kPumpBufferSize = 64 * 1024;

namespace detail {

// Copies `from` into `to` until a read or a write fails; returns why (eof: `from` ended).
template <typename From, typename To>
net::awaitable<boost::system::error_code> copy_until_end(From& from, To& to,
                                                         ShardedCount* counted) {
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
  co_return ec;
}

template <typename From, typename To>
net::awaitable<void> copy_one_way(From& from, To& to, bool& failed, ShardedCount* counted) {
  boost::system::error_code ec = co_await copy_until_end(from, to, counted);
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

namespace detail {

// A WebSocket relayed as bytes, `a` the client and `b` the server whose frames go down to it.
template <typename A, typename B>
struct WsRelay {
  WsRelay(A&& a_, B&& b_)
      : a(std::move(a_)), b(std::move(b_)), done(a.get_executor()), grace(a.get_executor()) {
    done.expires_at(net::steady_timer::time_point::max());
  }
  A a;
  B b;
  net::steady_timer done;   // cancelled when the down direction has ended
  net::steady_timer grace;  // runs from the request to go away
  ws::FrameTracker down;
  bool down_ended = false;
  bool down_writing = false;
  bool going_away = false;
  bool close_sent = false;  // started: nothing of the server's goes down after it
  bool ended = false;

  void cut() {
    boost::system::error_code ec;
    a.close(ec);
    b.close(ec);
  }
};

// Sends the client cabind's close frame (1001) and half-closes towards it: it answers with its
// own close frame and closes its side, which ends the up direction.
template <typename A, typename B>
net::awaitable<void> send_going_away(std::shared_ptr<WsRelay<A, B>> r) {
  r->close_sent = true;
  static const std::string frame = ws::close_frame(ws::kCloseGoingAway, ws::kGoingAwayReason);
  boost::system::error_code ec;
  co_await net::async_write(r->a, net::buffer(frame), net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    r->cut();
    co_return;
  }
  r->a.shutdown(net::socket_base::shutdown_send, ec);
}

template <typename A, typename B>
net::awaitable<void> cut_after_grace(std::shared_ptr<WsRelay<A, B>> r) {
  r->grace.expires_after(ws::kGoingAwayGrace);
  boost::system::error_code ec;
  co_await r->grace.async_wait(net::redirect_error(net::use_awaitable, ec));
  if (!r->ended) r->cut();
}

// On the relay's executor, from the connection set at shutdown.
template <typename A, typename B>
void go_away(const std::shared_ptr<WsRelay<A, B>>& r) {
  if (r->going_away || r->ended) return;
  r->going_away = true;
  if (r->down.broken() || r->down_ended) {
    r->cut();  // no frame boundary to put a close frame at, or no way to send it
    return;
  }
  auto ex = r->a.get_executor();
  net::co_spawn(ex, cut_after_grace(r), net::detached);
  // Else the down direction sends it when the frame it is in has gone down.
  if (!r->down_writing && r->down.at_boundary()) {
    net::co_spawn(ex, send_going_away(r), net::detached);
  }
}

// The server's frames down to the client, `first` (read with the handshake) before the rest,
// tracked so that a close frame can go in between.
template <typename A, typename B>
net::awaitable<void> ws_down(std::shared_ptr<WsRelay<A, B>> r, std::string first,
                             ShardedCount* counted) {
  std::array<char, kPumpBufferSize> buf;
  boost::system::error_code ec;
  bool from_first = !first.empty();
  for (;;) {
    const char* data = first.data();
    size_t n = first.size();
    if (!std::exchange(from_first, false)) {
      n = co_await r->b.async_read_some(net::buffer(buf),
                                        net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      data = buf.data();
    }
    if (r->close_sent) break;  // the client has been told: what follows is not for it
    const std::span<const uint8_t> got(reinterpret_cast<const uint8_t*>(data), n);
    size_t forward = n;
    if (r->going_away) {
      forward = r->down.advance(got, true);
      if (r->down.broken()) {
        r->cut();
        break;
      }
    } else {
      r->down.advance(got);  // a broken stream is still relayed, only not tracked
    }
    r->down_writing = true;
    co_await net::async_write(r->a, net::buffer(data, forward),
                              net::redirect_error(net::use_awaitable, ec));
    r->down_writing = false;
    if (ec) break;
    count_bytes(counted, forward);
    if (r->going_away && r->down.at_boundary()) {
      co_await send_going_away(r);
      co_return;
    }
  }
  if (r->close_sent) co_return;
  if (ec == net::error::eof && r->going_away && r->down.at_boundary()) {
    co_await send_going_away(r);
  } else if (ec == net::error::eof) {
    r->a.shutdown(net::socket_base::shutdown_send, ec);  // the up direction may still finish
  } else {
    r->cut();
  }
}

// The client's bytes up to the server, untouched; its end ends the relay once cabind has said
// goodbye, whatever the server still does.
template <typename A, typename B>
net::awaitable<void> ws_up(std::shared_ptr<WsRelay<A, B>> r, ShardedCount* counted) {
  boost::system::error_code ec = co_await copy_until_end(r->a, r->b, counted);
  if (ec == net::error::eof && !r->going_away) {
    r->b.shutdown(net::socket_base::shutdown_send, ec);
  } else {
    r->cut();
  }
}

}  // namespace detail

// pump() for a WebSocket whose handshake is done, with `b` the server and `down_first` what was
// read from it with the handshake: when the connection set asks `a` (a ClientStream) to go away,
// the client gets a close frame with 1001 between two of the server's frames, and the relay ends
// when it answers (or after ws::kGoingAwayGrace).
template <typename A, typename B>
net::awaitable<void> pump_websocket(A a, B b, RelayCounts counts = {}, std::string down_first = {}) {
  using Relay = detail::WsRelay<A, B>;
  auto r = std::make_shared<Relay>(std::move(a), std::move(b));
  if constexpr (requires(A& s) { s.on_going_away(std::function<void()>{}); }) {
    r->a.on_going_away([weak = std::weak_ptr<Relay>(r)] {
      if (auto r = weak.lock()) detail::go_away(r);
    });
  }
  net::co_spawn(r->a.get_executor(), detail::ws_down(r, std::move(down_first), counts.down), [r](std::exception_ptr) {
    r->down_ended = true;
    r->done.cancel();
  });
  co_await detail::ws_up(r, counts.up);
  if (!r->down_ended) {
    boost::system::error_code ec;
    co_await r->done.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  r->ended = true;
  r->grace.cancel();
  r->cut();
}

}  // namespace cabin
