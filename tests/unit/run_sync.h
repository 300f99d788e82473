// run_sync(): runs a coroutine on an io_context until it finishes, for unit tests.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <exception>
#include <optional>

namespace cabin::testing {

namespace net = boost::asio;

// Runs `aw` on `io` until it finishes; fails the test if it takes longer than `limit`. What else
// was queued on `io` runs meanwhile.
template <typename T>
T run_sync(net::io_context& io, net::awaitable<T> aw,
           std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  std::optional<T> out;
  // Stored from inside a coroutine: Asio 1.18's co_spawn handlers need default-constructible T.
  net::co_spawn(
      io,
      [](net::awaitable<T> a, std::optional<T>& slot) -> net::awaitable<void> {
        slot.emplace(co_await std::move(a));
      }(std::move(aw), out),
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!out && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_one_until(deadline);
  }
  REQUIRE(out.has_value());
  return std::move(*out);
}

inline void run_sync(net::io_context& io, net::awaitable<void> aw,
                     std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  (void)run_sync(
      io,
      [](net::awaitable<void> a) -> net::awaitable<bool> {
        co_await std::move(a);
        co_return true;
      }(std::move(aw)),
      limit);
}

// Runs `io` until `done()` holds; fails the test after `limit`.
template <typename Done>
void run_until(net::io_context& io, Done done,
               std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_one_until(deadline);
  }
  REQUIRE(done());
}

// Runs `io` for `d`: what happens, or does not, meanwhile.
inline void run_for(net::io_context& io, std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    io.restart();
    io.run_one_until(until);
  }
}

}  // namespace cabin::testing
