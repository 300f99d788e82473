// spawn(): what escapes a coroutine nobody awaits is logged, and the io_context runs on.
#include "common/spawn.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <stdexcept>

using namespace cabin;

namespace {

net::awaitable<void> throws() {
  throw std::runtime_error("boom");
  co_return;
}

}  // namespace

TEST_CASE("an exception escaping a spawned coroutine does not stop io_context::run", "[spawn]") {
  net::io_context io;
  bool after = false;
  cabin::spawn(io, throws(), "a coroutine that throws");
  int captured = 0;
  cabin::spawn(
      io,
      [&captured, n = 41]() -> net::awaitable<void> {
        captured = n + 1;  // the callable (and its captures) outlives the first suspension
        co_return;
      },
      "a lambda");
  net::post(io, [&] { after = true; });
  REQUIRE_NOTHROW(io.run());
  CHECK(after);
  CHECK(captured == 42);
}
