#include "vm-images/agent/frames.h"

#include <unistd.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/frame_stream.h"
#include "common/log.h"
#include "common/spawn.h"

namespace cabin::agent {
namespace {

using generic_stream = net::generic::stream_protocol;
using Clock = std::chrono::steady_clock;

// What the streamer and the peer watcher share; either may outlive the other briefly.
struct StreamState {
  StreamState(generic_stream::socket s, int damage_fd)
      : socket(std::move(s)),
        damage(socket.get_executor(), damage_fd),
        timer(socket.get_executor()) {}
  void wake() {
    damage.cancel();
    timer.cancel();
  }
  generic_stream::socket socket;
  net::posix::stream_descriptor damage;  // a dup of the X connection's fd, only waited on
  net::steady_timer timer;
  bool closed = false;
};

// The peer never sends anything after its request: any read completing means it went away.
net::awaitable<void> watch_peer(std::shared_ptr<StreamState> st) {
  std::array<char, 512> buf;
  boost::system::error_code ec;
  while (!ec && !st->closed) {
    co_await st->socket.async_read_some(net::buffer(buf),
                                        net::redirect_error(net::use_awaitable, ec));
  }
  st->closed = true;
  st->wake();
}

}  // namespace

Result<std::unique_ptr<FrameCapture>> open_frame_capture(const std::string& display_name,
                                                         const FrameSpec& spec) {
  if (display_name.empty()) {
    return make_error(Errc::kUnavailable, "display_not_ready", "the X display is not up yet");
  }
  auto display = vnc::Display::open(display_name);
  if (!display) return display.error();
  if (auto r = check_shot(spec.shot, display->size()); !r) return r.error();
  // The capturer and tracker point into the Display's connection, which stays put when the
  // Display object moves into the struct.
  auto capturer = vnc::Capturer::create(*display);
  if (!capturer) return capturer.error();
  auto damage = vnc::DamageTracker::create(*display);
  if (!damage) return damage.error();
  return std::make_unique<FrameCapture>(
      FrameCapture{std::move(*display), std::move(*capturer), std::move(*damage)});
}

net::awaitable<void> serve_frames(generic_stream::socket socket,
                                  std::unique_ptr<FrameCapture> capture, FrameSpec spec) {
  auto log = logger("agent.frames");
  const int fd = ::dup(capture->damage.fd());
  if (fd < 0) {
    log->warn("dup: {}", std::strerror(errno));
    co_return;
  }
  auto st = std::make_shared<StreamState>(std::move(socket), fd);
  static constexpr std::string_view kHead =
      "HTTP/1.1 200 OK\r\nContent-Type: application/x-cabin-frames\r\n"
      "Cache-Control: no-store\r\nConnection: close\r\n\r\n";
  boost::system::error_code ec;
  co_await net::async_write(st->socket, net::buffer(kHead),
                            net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;
  cabin::spawn(st->socket.get_executor(), watch_peer(st), "frame stream's peer watch");

  const auto gap = std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(1)) / spec.fps;
  auto next = Clock::now();
  vnc::Image frame;
  vnc::Image shown;  // the pixels of the last frame sent
  size_t sent = 0;
  while (!st->closed && !capture->display.lost()) {
    if (!capture->damage.take_damage()) {
      co_await st->damage.async_wait(net::posix::stream_descriptor::wait_read,
                                     net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    if (Clock::now() < next) {
      // Over the rate: let changes pile up and send them as one frame when the gap has passed.
      st->timer.expires_at(next);
      co_await st->timer.async_wait(net::redirect_error(net::use_awaitable, ec));
      if (st->closed) break;
      (void)capture->damage.take_damage();  // covered by the grab below
    }
    if (auto grabbed = grab_shot(capture->capturer, frame, spec.shot); !grabbed) {
      log->warn("frame: {}", grabbed.error().message);
      break;
    }
    // X reports damage for every draw, also one that paints the same pixels again (Chromium
    // does, a few seconds after a page loads): that is not a change of the screen.
    if (sent && frame.size() == shown.size() && frame.pixels == shown.pixels) continue;
    next = Clock::now() + gap;
    auto img = encode_shot(frame, spec.shot);
    if (!img) {
      log->warn("frame: {}", img.error().message);
      break;
    }
    std::swap(frame, shown);  // the next grab reuses the older buffer
    const auto header =
        frames::encode_header({static_cast<uint32_t>(img->bytes.size()), img->width, img->height});
    const std::array<net::const_buffer, 2> bufs{net::buffer(header), net::buffer(img->bytes)};
    // Awaited before the next grab: a slow reader gets fewer, fresher frames, never a queue.
    co_await net::async_write(st->socket, bufs, net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    ++sent;
  }
  log->debug("frame stream ended after {} frames", sent);
  st->closed = true;
  st->socket.close(ec);
  st->damage.close(ec);
}

}  // namespace cabin::agent
