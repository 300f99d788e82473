// FrameHub against a fake sandbox: viewers share agent streams, a session's kinds of frames are
// bounded, and the agent's refusals reach the viewer. No Chromium, no Xvfb.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "server/handlers/frame_hub.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/spawn.h"
#include "server/sessions/session_manager.h"
#include "tests/unit/run_sync.h"
#include "tests/unit/server/fake_manager.h"

namespace {

using namespace cabin;
using namespace std::chrono_literals;
using cabin::testing::FakeDriver;
using cabin::testing::run_sync;
using cabin::testing::run_until;
using tcp = net::ip::tcp;

struct HubFixture : cabin::testing::FakeManager {
  HubFixture() : session(create_ok()) {}

  // A viewer: cabind's end of a real loopback connection, and the client's.
  struct Viewer {
    http_api::ClientStream server;
    tcp::socket client;
    std::string got;
    bool served = false;  // the hub is done with it
    bool closed = false;  // the client has read all cabind sent, to its end
  };

  std::unique_ptr<Viewer> viewer() {
    tcp::acceptor a(io, {net::ip::address_v4::loopback(), 0});
    tcp::socket c(io);
    c.connect(a.local_endpoint());
    auto v = std::make_unique<Viewer>(
        Viewer{http_api::ClientStream(boost::beast::tcp_stream(a.accept())), std::move(c)});
    read_all(*v);
    return v;
  }

  // The client reads whatever comes, into `got`.
  void read_all(Viewer& v) {
    cabin::spawn(
        io,
        [&v]() -> net::awaitable<void> {
          char buf[4096];
          boost::system::error_code ec;
          while (!ec) {
            size_t n = co_await v.client.async_read_some(
                net::buffer(buf), net::redirect_error(net::use_awaitable, ec));
            v.got.append(buf, n);
          }
          v.closed = true;
        },
        "viewer's client");
  }

  void serve_mjpeg(Viewer& v, const std::string& query) {
    cabin::spawn(
        io,
        [this, &v, query]() -> net::awaitable<void> {
          co_await hub.serve_mjpeg(session, query, std::move(v.server));
          v.served = true;
        },
        "MJPEG viewer");
  }

  size_t frame_streams_asked() const {
    size_t n = 0;
    for (const auto& t : driver->sandboxes[0]->targets)
      n += t.starts_with(agent_protocol::kFramesPath);
    return n;
  }

  sessions::SessionPtr session;
  http_api::FrameHub hub;
};

TEST_CASE("viewers of the same frames share one agent stream, and it ends with the last",
          "[frames]") {
  HubFixture f;
  auto a = f.viewer();
  auto b = f.viewer();
  f.serve_mjpeg(*a, "format=jpeg&fps=5");
  run_until(f.io, [&] { return a->got.find("jpeg-bytes-1") != std::string::npos; });
  CHECK(a->got.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(a->got.find("Content-Type: image/jpeg\r\nContent-Length: 12\r\n\r\njpeg-bytes-1\r\n") !=
        std::string::npos);
  f.serve_mjpeg(*b, "format=jpeg&fps=5");
  run_until(f.io, [&] { return b->got.find("jpeg-bytes-1") != std::string::npos; });
  CHECK(f.frame_streams_asked() == 1);
  CHECK(f.hub.feeds() == 1);

  a->client.close();
  run_until(f.io, [&] { return a->served; });
  CHECK(f.hub.feeds() == 1);  // b still watches
  b->client.close();
  run_until(f.io, [&] { return b->served && f.hub.feeds() == 0; });
  CHECK(f.frame_streams_asked() == 1);
}

TEST_CASE("a session streams at most a few kinds of frames at once: then 429", "[frames]") {
  HubFixture f;
  std::vector<std::unique_ptr<HubFixture::Viewer>> open;
  for (size_t i = 0; i < http_api::kMaxFeedsPerSession; ++i) {
    open.push_back(f.viewer());
    f.serve_mjpeg(*open.back(), "format=jpeg&fps=" + std::to_string(i + 1));
  }
  run_until(f.io, [&] { return f.hub.feeds() == http_api::kMaxFeedsPerSession; });
  auto extra = f.viewer();
  f.serve_mjpeg(*extra, "format=jpeg&fps=30");
  run_until(f.io, [&] { return extra->served && extra->closed; });
  CHECK(extra->got.starts_with("HTTP/1.1 429 "));
  CHECK(extra->got.find("too_many_streams") != std::string::npos);
  CHECK(f.frame_streams_asked() == http_api::kMaxFeedsPerSession);  // refused before the agent
  // One kind already open is still joined.
  auto again = f.viewer();
  f.serve_mjpeg(*again, "format=jpeg&fps=1");
  run_until(f.io, [&] { return again->got.find("jpeg-bytes-1") != std::string::npos; });
}

TEST_CASE("the agent's refusal of a stream reaches the viewer as it said it", "[frames]") {
  HubFixture f;
  f.driver->sandboxes[0]->handler = [](const testing::AgentRequest&) {
    return testing::json_answer(boost::beast::http::status::bad_request,
                                R"({"error":{"code":"bad_query","message":"width too large"}})");
  };
  auto v = f.viewer();
  f.serve_mjpeg(*v, "format=jpeg&width=9999");
  run_until(f.io, [&] { return v->served && v->closed; });
  CHECK(v->got.starts_with("HTTP/1.1 400 "));
  CHECK(v->got.find("\"code\":\"bad_query\"") != std::string::npos);
  CHECK(v->got.find("width too large") != std::string::npos);
  CHECK(f.hub.feeds() == 0);
}

TEST_CASE("a feed whose agent stream ends closes its viewers", "[frames]") {
  HubFixture f;
  auto v = f.viewer();
  f.serve_mjpeg(*v, "format=jpeg");
  run_until(f.io, [&] { return v->got.find("jpeg-bytes-1") != std::string::npos; });
  f.driver->sandboxes[0]->held.clear();  // the agent's end goes
  run_until(f.io, [&] { return v->served && v->closed && f.hub.feeds() == 0; });
}

TEST_CASE("an MJPEG viewer that stops reading is cut off after the write timeout", "[frames]") {
  HubFixture f;
  // One frame larger than both socket buffers: its write cannot finish while nobody reads.
  f.driver->sandboxes[0]->handler = [](const testing::AgentRequest&) {
    return testing::frames_answer({std::string(60000, 'j')});
  };
  http_api::FrameHub hub(200ms);
  tcp::acceptor a(f.io, {net::ip::address_v4::loopback(), 0});
  tcp::socket client(f.io);
  client.open(tcp::v4());
  client.set_option(net::socket_base::receive_buffer_size(1024));
  client.connect(a.local_endpoint());
  tcp::socket server = a.accept();
  server.set_option(net::socket_base::send_buffer_size(1024));
  bool served = false;
  cabin::spawn(
      f.io,
      [&]() -> net::awaitable<void> {
        co_await hub.serve_mjpeg(
            f.session, "format=jpeg",
            http_api::ClientStream(boost::beast::tcp_stream(std::move(server))));
        served = true;
      },
      "MJPEG viewer");
  run_until(f.io, [&] { return hub.feeds() == 1; });
  // Without the watch the write would wait as long as the client lets it.
  run_until(
      f.io, [&] { return served; }, 10s);
  CHECK(served);
  run_until(f.io, [&] { return hub.feeds() == 0; });
  // What the client still gets ends.
  std::string got;
  boost::system::error_code ec;
  while (!ec) {
    char buf[4096];
    got.append(buf, client.read_some(net::buffer(buf), ec));
  }
  CHECK(got.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(got.size() < 60000);
}

}  // namespace
