// One connection from the sandbox to the egress proxy, shared by proxy.cpp and intercept.cpp.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/egress/proxy.h"

namespace cabin::egress {

int64_t unix_ms();
// The proxy's own answer: the reason in the body and in X-Cabin-Egress, for a person reading
// curl's output or Chromium's net log; the connection closes after it.
std::string proxy_refusal(int status, std::string_view reason);

struct EgressProxy::Conn {
  explicit Conn(net::ip::tcp::socket c)
      : client(std::move(c)), upstream(client.get_executor()), idle(client.get_executor()) {}
  net::ip::tcp::socket client;
  net::ip::tcp::socket upstream;
  net::steady_timer idle;
  std::optional<ProxyTarget> target;
  std::optional<IpAddress> address;
  std::chrono::steady_clock::time_point last_active = std::chrono::steady_clock::now();
  uint64_t up = 0, down = 0;
  std::string closed_by_proxy;  // why the proxy ended it, if it did
  bool open = true;

  void touch() { last_active = std::chrono::steady_clock::now(); }
  void close(std::string why) {
    if (closed_by_proxy.empty()) closed_by_proxy = std::move(why);
    finish();
  }
  void finish() {
    open = false;
    boost::system::error_code ec;
    client.close(ec);
    upstream.close(ec);
    idle.cancel();
  }
};

inline constexpr size_t kCopyChunk = 64 * 1024;

// A coroutine run beside the caller's, on the same executor, that the caller can wait for: the
// other direction of a two-way copy.
class Beside {
 public:
  explicit Beside(const net::any_io_executor& ex) : state_(std::make_shared<State>(ex)) {}
  void start(net::awaitable<void> a) {
    state_->done = false;
    net::co_spawn(state_->timer.get_executor(), std::move(a), [st = state_](std::exception_ptr) {
      st->done = true;
      st->timer.cancel();
    });
  }
  // Returns at once if nothing was started or it has ended.
  net::awaitable<void> wait() {
    boost::system::error_code ec;
    if (!state_->done)
      co_await state_->timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  }

 private:
  struct State {
    explicit State(const net::any_io_executor& ex)
        : timer(ex, net::steady_timer::time_point::max()) {}
    net::steady_timer timer;  // cancelled when it ends, which wakes a wait already begun
    bool done = true;
  };
  std::shared_ptr<State> state_;
};

// `from` to `to` until either fails or ends, counting into `moved`; each transfer is activity.
// Returns what ended it (eof: `from` ended).
template <typename From, typename To>
net::awaitable<boost::system::error_code> copy_counted(std::shared_ptr<EgressProxy::Conn> c,
                                                       From& from, To& to, uint64_t& moved) {
  std::vector<char> buf(kCopyChunk);
  boost::system::error_code ec;
  for (;;) {
    const size_t n = co_await from.async_read_some(net::buffer(buf),
                                                   net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    c->touch();
    co_await net::async_write(to, net::buffer(buf.data(), n),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    moved += n;
  }
  co_return ec;
}

}  // namespace cabin::egress
