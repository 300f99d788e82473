// Screenshot and computer-use endpoints against a private Xvfb, with the HTTP server in-process.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/computer_actions.h"
#include "tests/unit/agent/server_fixture.h"
#include "tests/unit/agent/test_util.h"
#include "vm-images/agent/computer.h"
#include "vm-images/agent/frames.h"
#include "vm-images/agent/desktop.h"
#include "vm-images/agent/http_server.h"
// Last: Xlib's macros (None, Status, Bool) would break the headers above.
#include "tests/unit/vnc/xvfb_fixture.h"

using namespace cabin::agent;
using cabin::agent::testing::kSecret;
using cabin::agent::testing::ServerFixture;
using cabin::agent::testing::TempDir;
using cabin::vnc::testing::Client;
using cabin::vnc::testing::Xvfb;
namespace beast = boost::beast;
namespace http = beast::http;
namespace cc = cabin::computer;
using local = net::local::stream_protocol;
using json = nlohmann::json;

namespace {

constexpr int kW = 640;
constexpr int kH = 480;

struct DesktopFixture {
  DesktopFixture() : xvfb(kW, kH), agent(kW, kH) {}
  void set_display(const std::string& name) {
    agent.on_server([&] { agent.state.set_display(name); });
  }
  http::response<http::string_body> call(const std::string& method, const std::string& target,
                                         const std::string& body = "") {
    local::socket s = agent.connect();
    std::string raw = method + " " + target + " HTTP/1.1\r\nHost: agent\r\nX-Cabin-Agent-Secret: " +
                      kSecret + "\r\nConnection: close\r\n";
    if (method == "POST") raw += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    raw += "\r\n" + body;
    net::write(s, net::buffer(raw));
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    return res;
  }
  json computer(const cc::Batch& b, int want_status) {
    auto res = call("POST", "/agent/v1/computer", cc::to_json(b).dump());
    INFO(res.body());
    REQUIRE(res.result_int() == static_cast<unsigned>(want_status));
    return json::parse(res.body());
  }

  Xvfb xvfb;
  ServerFixture agent;
};

uint32_t be32(const std::string& s, size_t at) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

// Width and height from a PNG's IHDR.
std::pair<int, int> png_size(const std::string& png) {
  REQUIRE(png.size() > 24);
  REQUIRE(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  REQUIRE(png.compare(12, 4, "IHDR") == 0);
  return {static_cast<int>(be32(png, 16)), static_cast<int>(be32(png, 20))};
}

// Width and height from a JPEG's first SOFn segment.
std::pair<int, int> jpeg_size(const std::string& jpg) {
  REQUIRE(jpg.size() > 4);
  REQUIRE(static_cast<unsigned char>(jpg[0]) == 0xFF);
  REQUIRE(static_cast<unsigned char>(jpg[1]) == 0xD8);
  size_t i = 2;
  while (i + 9 < jpg.size()) {
    REQUIRE(static_cast<unsigned char>(jpg[i]) == 0xFF);
    const unsigned marker = static_cast<unsigned char>(jpg[i + 1]);
    const size_t len = (static_cast<unsigned char>(jpg[i + 2]) << 8) |
                       static_cast<unsigned char>(jpg[i + 3]);
    if (marker >= 0xC0 && marker <= 0xC3) {
      auto u16 = [&](size_t at) {
        return (static_cast<unsigned char>(jpg[at]) << 8) | static_cast<unsigned char>(jpg[at + 1]);
      };
      return {u16(i + 7), u16(i + 5)};
    }
    i += 2 + len;
  }
  FAIL("no SOF segment");
  return {0, 0};
}

std::string base64_decode(const std::string& in) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const size_t v = kAlphabet.find(c);
    REQUIRE(v != std::string::npos);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("screenshot query parsing is strict", "[agent][desktop]") {
  auto ok = parse_screenshot_query("format=jpeg&quality=55&x=1&y=2&w=30&h=40&width=15&height=20&cursor=1");
  REQUIRE(ok.ok());
  CHECK(ok->format == cc::ImageFormat::kJpeg);
  CHECK(ok->quality == 55);
  CHECK(ok->region == cabin::vnc::Rect{1, 2, 30, 40});
  CHECK(ok->size == cabin::vnc::Size{15, 20});
  CHECK(ok->cursor);
  auto empty = parse_screenshot_query("");
  REQUIRE(empty.ok());
  CHECK(empty->format == cc::ImageFormat::kPng);
  CHECK(empty->quality == 80);
  CHECK_FALSE(empty->cursor);
  CHECK_FALSE(empty->region);
  for (const char* bad : {"zoom=2", "format=gif", "quality=0", "quality=101", "x=1&y=2&w=3",
                          "width=10", "x=-1&y=0&w=1&h=1", "w=0&h=1&x=0&y=0", "quality=08",
                          "cursor=2", "format=png&format=png", "format", "quality=abc"}) {
    INFO(bad);
    auto r = parse_screenshot_query(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == "invalid_request");
  }
}

TEST_CASE("frame stream queries add fps to the screenshot's", "[agent][desktop]") {
  auto ok = parse_frames_query("format=jpeg&fps=30&width=64&height=40");
  REQUIRE(ok.ok());
  CHECK(ok->fps == 30);
  CHECK(ok->shot.format == cc::ImageFormat::kJpeg);
  CHECK(ok->shot.size == cabin::vnc::Size{64, 40});
  auto plain = parse_frames_query("");
  REQUIRE(plain.ok());
  CHECK(plain->fps == 15);
  for (const char* bad : {"fps=0", "fps=61", "fps=05", "fps=", "fps=1&fps=2", "fps=abc",
                          "fps=10&zoom=1"}) {
    INFO(bad);
    auto r = parse_frames_query(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == "invalid_request");
  }
}

TEST_CASE("scroll pixels become notches", "[agent][computer]") {
  CHECK(scroll_notches(0, cc::ScrollUnit::kPixel) == 0);
  CHECK(scroll_notches(1, cc::ScrollUnit::kPixel) == 1);
  CHECK(scroll_notches(-149, cc::ScrollUnit::kPixel) == 1);
  CHECK(scroll_notches(150, cc::ScrollUnit::kPixel) == 2);
  CHECK(scroll_notches(100000, cc::ScrollUnit::kPixel) == cc::kMaxScrollNotches);
  CHECK(scroll_notches(-7, cc::ScrollUnit::kNotch) == 7);
}

TEST_CASE("gate admits one holder at a time, in arrival order", "[agent][computer]") {
  net::io_context io;
  Gate gate(io.get_executor());
  std::vector<int> order;
  auto worker = [&](int id) -> net::awaitable<void> {
    Gate::Lock lock = co_await gate.acquire();
    order.push_back(id);
    // Give the others a chance to run while this one holds the gate.
    co_await net::post(io, net::use_awaitable);
    co_await net::post(io, net::use_awaitable);
    order.push_back(-id);
  };
  for (int id = 1; id <= 3; ++id) net::co_spawn(io, worker(id), net::detached);
  io.run();
  CHECK(order == std::vector<int>{1, -1, 2, -2, 3, -3});
}

TEST_CASE("screenshot endpoint: formats, region, scaling, errors", "[agent][desktop]") {
  DesktopFixture f;
  // Before Xvfb is known, the desktop is unavailable.
  auto early = f.call("GET", "/agent/v1/screenshot");
  CHECK(early.result_int() == 503);
  CHECK(json::parse(early.body())["error"]["code"] == "display_not_ready");
  f.set_display(f.xvfb.name());

  auto png = f.call("GET", "/agent/v1/screenshot");
  REQUIRE(png.result_int() == 200);
  CHECK(png[http::field::content_type] == "image/png");
  CHECK(png_size(png.body()) == std::pair{kW, kH});

  auto jpeg = f.call("GET", "/agent/v1/screenshot?format=jpeg&quality=50&cursor=1");
  REQUIRE(jpeg.result_int() == 200);
  CHECK(jpeg[http::field::content_type] == "image/jpeg");
  CHECK(jpeg_size(jpeg.body()) == std::pair{kW, kH});

  auto region = f.call("GET", "/agent/v1/screenshot?x=10&y=20&w=100&h=50");
  REQUIRE(region.result_int() == 200);
  CHECK(png_size(region.body()) == std::pair{100, 50});

  auto scaled = f.call("GET", "/agent/v1/screenshot?x=0&y=0&w=640&h=480&width=320&height=200");
  REQUIRE(scaled.result_int() == 200);
  CHECK(png_size(scaled.body()) == std::pair{320, 200});

  auto scaled_jpeg = f.call("GET", "/agent/v1/screenshot?format=jpeg&width=64&height=48");
  REQUIRE(scaled_jpeg.result_int() == 200);
  CHECK(jpeg_size(scaled_jpeg.body()) == std::pair{64, 48});

  for (const char* bad : {"?bogus=1", "?x=1", "?quality=1000", "?x=600&y=0&w=100&h=10",
                          "?width=abc&height=1"}) {
    INFO(bad);
    auto res = f.call("GET", std::string("/agent/v1/screenshot") + bad);
    CHECK(res.result_int() == 400);
    CHECK(res[http::field::content_type] == "application/json");
    CHECK(json::parse(res.body())["error"].contains("code"));
  }
  CHECK(f.call("POST", "/agent/v1/screenshot").result_int() == 405);
}

TEST_CASE("computer: move, click, cursor_position and screenshots", "[agent][computer]") {
  DesktopFixture f;
  f.set_display(f.xvfb.name());
  Client client(f.xvfb.name());
  client.make_input_window();

  cc::Batch b;
  b.actions.push_back(cc::Move{{30, 40}, {}});
  b.actions.push_back(cc::CursorPosition{});
  b.actions.push_back(cc::Click{cc::Point{123, 45}, cc::Button::kRight, 2, {cc::Modifier::kShift}});
  b.actions.push_back(cc::CursorPosition{});
  b.actions.push_back(cc::Scroll{cc::Point{200, 100}, 0, 240, cc::ScrollUnit::kPixel, {}});
  b.actions.push_back(cc::Screenshot{cc::Rect{0, 0, 64, 32}, cc::Size{32, 16}, cc::ImageFormat::kJpeg});
  b.screenshot_after = true;
  b.model_size = cc::Size{320, 240};
  json j = f.computer(b, 200);
  INFO(j.dump().substr(0, 500));

  REQUIRE(j["results"].size() == 6);
  CHECK(j["results"][0] == json{{"op", "move"}});
  CHECK(j["results"][1] == json{{"op", "cursor_position"}, {"x", 30}, {"y", 40}});
  CHECK(j["results"][2]["op"] == "click");
  CHECK(j["results"][3] == json{{"op", "cursor_position"}, {"x", 123}, {"y", 45}});
  CHECK(j["results"][4]["op"] == "scroll");
  const json& shot = j["results"][5];
  CHECK(shot["op"] == "screenshot");
  CHECK(shot["media_type"] == "image/jpeg");
  CHECK(shot["width"] == 32);
  CHECK(shot["height"] == 16);
  CHECK(jpeg_size(base64_decode(shot["data"])) == std::pair{32, 16});
  REQUIRE(j.contains("screenshot"));
  CHECK(j["screenshot"]["media_type"] == "image/png");
  CHECK(png_size(base64_decode(j["screenshot"]["data"])) == std::pair{320, 240});
  CHECK_FALSE(j.contains("error"));

  // Two right-button presses at the exact spot, with shift held; then two wheel-down notches.
  XEvent ev;
  for (int i = 0; i < 2; ++i) {
    REQUIRE(client.next_event(ev, [](const XEvent& e) { return e.type == ButtonPress; }));
    CHECK(ev.xbutton.button == 3u);
    CHECK(ev.xbutton.x_root == 123);
    CHECK(ev.xbutton.y_root == 45);
    CHECK((ev.xbutton.state & ShiftMask) != 0);
  }
  for (int i = 0; i < 2; ++i) {
    REQUIRE(client.next_event(ev, [](const XEvent& e) { return e.type == ButtonPress; }));
    CHECK(ev.xbutton.button == 5u);
    CHECK(ev.xbutton.x_root == 200);
  }
  CHECK_FALSE(client.next_event(ev, [](const XEvent& e) { return e.type == ButtonPress; },
                                std::chrono::milliseconds(0)));
  CHECK(client.no_key_down());
  CHECK((client.pointer_mask() & (Button1Mask | Button2Mask | Button3Mask)) == 0);
}

TEST_CASE("computer: typing, keys and drag", "[agent][computer]") {
  DesktopFixture f;
  f.set_display(f.xvfb.name());
  Client client(f.xvfb.name());
  client.make_input_window();

  cc::Batch b;
  b.actions.push_back(cc::TypeText{"aB1 é€\n", 0});
  b.actions.push_back(cc::TypeText{"xy", 5});
  b.actions.push_back(cc::Key{{"ctrl", "a"}});
  b.actions.push_back(cc::Hold{{"shift"}, 5});
  b.actions.push_back(cc::Drag{{{10, 10}, {100, 10}, {100, 90}}, cc::Button::kLeft, {}});
  b.actions.push_back(cc::Wait{1});
  json j = f.computer(b, 200);
  REQUIRE(j["results"].size() == 6);

  // The ASCII part arrives as typed, in order.
  std::string typed;
  XEvent ev;
  while (typed.size() < 4) {
    REQUIRE(client.next_event(ev, [](const XEvent& e) { return e.type == KeyPress; }));
    char buf[8];
    KeySym ks = 0;
    const int n = XLookupString(&ev.xkey, buf, sizeof(buf), &ks, nullptr);
    if (n == 1 && buf[0] >= ' ') typed.push_back(buf[0]);
  }
  CHECK(typed == "aB1 ");

  // The drag presses at its start, moves through the path with the button held, and lets go
  // at its end.
  REQUIRE(client.next_event(ev, [](const XEvent& e) { return e.type == ButtonPress; }));
  CHECK(ev.xbutton.x_root == 10);
  CHECK(ev.xbutton.y_root == 10);
  int held_motions = 0;
  REQUIRE(client.next_event(ev, [&](const XEvent& e) {
    if (e.type == MotionNotify && (e.xmotion.state & Button1Mask) != 0) ++held_motions;
    return e.type == ButtonRelease;
  }));
  CHECK(ev.xbutton.x_root == 100);
  CHECK(ev.xbutton.y_root == 90);
  CHECK(held_motions >= 3);
  CHECK(client.no_key_down());
  CHECK((client.pointer_mask() & Button1Mask) == 0);
}

TEST_CASE("computer: a failing action stops the batch with 422", "[agent][computer]") {
  DesktopFixture f;
  f.set_display(f.xvfb.name());
  Client client(f.xvfb.name());

  cc::Batch b;
  b.actions.push_back(cc::Move{{5, 6}, {}});
  b.actions.push_back(cc::Key{{"ctrl", "NoSuchKeysym"}});
  b.actions.push_back(cc::Move{{50, 60}, {}});
  b.screenshot_after = true;
  json j = f.computer(b, 422);
  REQUIRE(j["results"].size() == 1);
  CHECK(j["results"][0]["op"] == "move");
  CHECK(j["error"]["index"] == 1);
  CHECK(j["error"]["op"] == "key");
  CHECK(j["error"]["code"] == "unknown_key");
  CHECK_FALSE(j.contains("screenshot"));
  // The third action never ran, and the failed chord left nothing down.
  int x = 0, y = 0;
  client.pointer_mask(&x, &y);
  CHECK(x == 5);
  CHECK(y == 6);
  CHECK(client.no_key_down());

  // Parse errors are 400s and run nothing.
  auto bad = f.call("POST", "/agent/v1/computer", R"({"actions":[{"op":"move","x":9999,"y":1}]})");
  CHECK(bad.result_int() == 400);
  auto junk = f.call("POST", "/agent/v1/computer", "{not json");
  CHECK(junk.result_int() == 400);
  CHECK(f.call("GET", "/agent/v1/computer").result_int() == 405);
}
