// The agent's frame stream against a real Xvfb: what counts as a change of the screen.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "vm-images/agent/frames.h"

#include <sys/socket.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <string>

#include "common/frame_stream.h"
#include "tests/unit/agent/test_util.h"
#include "tests/unit/vnc/xvfb_fixture.h"

using namespace cabin;
using namespace cabin::agent;
using cabin::agent::testing::run_sync;
namespace net = boost::asio;
using Socket = net::generic::stream_protocol::socket;

namespace {

net::awaitable<std::string> read_frame(Socket& s) {
  std::array<uint8_t, frames::kFrameHeaderSize> head;
  co_await net::async_read(s, net::buffer(head), net::use_awaitable);
  auto h = frames::decode_header(head);
  REQUIRE(h.ok());
  std::string bytes(h->length, '\0');
  co_await net::async_read(s, net::buffer(bytes), net::use_awaitable);
  co_return bytes;
}

}  // namespace

TEST_CASE("a repaint of the same pixels is not a frame, the next change is", "[frames]") {
  vnc::testing::Xvfb x(320, 240);
  vnc::testing::Client c(x.name());
  c.fill_root(0, 0, 320, 240, 0x202020);
  c.sync();
  auto spec = parse_frames_query("format=png&fps=30");
  REQUIRE(spec.ok());
  auto capture = open_frame_capture(x.name(), *spec);
  REQUIRE(capture.ok());

  net::io_context io;
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  const net::generic::stream_protocol unix_stream(AF_UNIX, 0);
  Socket agent_end(io, unix_stream, fds[0]);
  Socket viewer(io, unix_stream, fds[1]);
  net::co_spawn(io, serve_frames(std::move(agent_end), std::move(*capture), *spec), net::detached);

  const bool changed = run_sync(io, [&]() -> net::awaitable<bool> {
    std::string head;
    co_await net::async_read_until(viewer, net::dynamic_buffer(head), "\r\n\r\n",
                                   net::use_awaitable);
    const std::string first = co_await read_frame(viewer);  // the screen as tracking starts
    // Damage without change: the same colour painted over the whole screen, again and again.
    for (int i = 0; i < 5; ++i) {
      c.fill_root(0, 0, 320, 240, 0x202020);
      c.sync();
    }
    // Time enough for the stream to grab (and, were it a change, send) what that damaged.
    net::steady_timer t(co_await net::this_coro::executor, std::chrono::milliseconds(500));
    co_await t.async_wait(net::use_awaitable);
    c.fill_root(10, 10, 40, 40, 0xff0000);
    c.sync();
    const std::string next = co_await read_frame(viewer);
    co_return next != first;
  }());
  CHECK(changed);
}
