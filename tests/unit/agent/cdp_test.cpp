// The agent's CDP call against a DevTools stand-in on loopback: an answer, an error answer and a
// connection that closes each come back as they are, the failures saying which.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <catch2/catch.hpp>
#include <string>

#include "tests/unit/run_sync.h"
#include "vm-images/agent/cdp.h"

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
using cabin::agent::CdpSocket;
using tcp = net::ip::tcp;

// Takes one connection, reads one call and answers it with `reply` (empty: closes instead).
net::awaitable<void> devtools_once(tcp::acceptor& acceptor, std::string reply) {
  beast::websocket::stream<tcp::socket> ws(co_await acceptor.async_accept(net::use_awaitable));
  co_await ws.async_accept(net::use_awaitable);
  beast::flat_buffer buf;
  co_await ws.async_read(buf, net::use_awaitable);
  if (reply.empty()) {
    co_await ws.async_close(beast::websocket::close_code::going_away, net::use_awaitable);
    co_return;
  }
  co_await ws.async_write(net::buffer(reply), net::use_awaitable);
}

struct Called {
  nlohmann::json answer;
  std::string why;
};

net::awaitable<Called> call(net::any_io_executor ex, uint16_t port) {
  CdpSocket ws(ex);
  const bool open =
      co_await cabin::agent::cdp_open(ws, port, "/devtools/page/1", std::chrono::seconds(5));
  REQUIRE(open);
  Called c;
  nlohmann::json params = {{"url", "data:,"}};
  c.answer = co_await cabin::agent::cdp_call(ws, 1, "Page.navigate", std::move(params), nullptr,
                                             &c.why);
  co_return c;
}

Called call_with(const std::string& reply) {
  net::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(net::ip::address_v4::loopback(), 0));
  const auto port = acceptor.local_endpoint().port();
  net::co_spawn(io, devtools_once(acceptor, reply), net::detached);
  return cabin::testing::run_sync(io, call(io.get_executor(), port));
}

}  // namespace

TEST_CASE("cdp_call: an answer, an error answer, a closed connection", "[agent][cdp]") {
  const auto ok = call_with(R"({"id":1,"result":{"frameId":"F"}})");
  CHECK(ok.answer.value("frameId", "") == "F");
  CHECK(ok.why.empty());

  const auto refused =
      call_with(R"({"id":1,"error":{"code":-32000,"message":"Cannot navigate to invalid URL"}})");
  CHECK(refused.answer.is_discarded());
  CHECK(refused.why == "an error: Cannot navigate to invalid URL");

  const auto closed = call_with("");
  CHECK(closed.answer.is_discarded());
  CHECK_THAT(closed.why, Catch::StartsWith("no answer: "));
}
