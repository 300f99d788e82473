// Desktop: the agent's one X connection (capture + input), screenshots, and the computer-use gate.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/agent_protocol.h"
#include "common/computer_actions.h"
#include "common/result.h"
#include "vnc/capture.h"
#include "vnc/display.h"
#include "vnc/input.h"

namespace cabin::agent {

namespace net = boost::asio;

using agent_protocol::kMaxImagePixels;

struct ShotSpec {
  std::optional<vnc::Rect> region;  // screen pixels; unset: the whole screen
  std::optional<vnc::Size> size;    // output size; unset: the region's own size
  computer::ImageFormat format = computer::ImageFormat::kPng;
  int quality = 80;  // JPEG only, 1..100
  bool cursor = false;
};

struct EncodedImage {
  std::string media_type;  // "image/png" or "image/jpeg"
  std::string bytes;
  int width = 0;
  int height = 0;
  double grab_ms = 0;    // capture, with the cursor drawn in when asked
  double encode_ms = 0;  // scaling and encoding
};

// GET /agent/v1/screenshot query: format, quality, x/y/w/h (all or none), width/height (both or
// none), cursor. Syntax only; the region is checked against the screen by Desktop::screenshot.
Result<ShotSpec> parse_screenshot_query(std::string_view query);

// The region lies inside `screen` and the output stays under kMaxImagePixels.
Result<void> check_shot(const ShotSpec& spec, vnc::Size screen);
// Grabs (into `frame`, reused), scales and encodes a checked spec.
Result<EncodedImage> shoot(vnc::Capturer& capturer, vnc::Image& frame, const ShotSpec& spec);
// shoot's two halves. grab_shot answers the milliseconds it took.
Result<double> grab_shot(vnc::Capturer& capturer, vnc::Image& frame, const ShotSpec& spec);
Result<EncodedImage> encode_shot(const vnc::Image& frame, const ShotSpec& spec);

// A FIFO coroutine mutex: computer batches of one agent run one after another, never interleaved.
class Gate {
 public:
  explicit Gate(net::any_io_executor ex) : ex_(std::move(ex)) {}
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  class Lock {
   public:
    Lock() = default;
    explicit Lock(Gate* g) : gate_(g) {}
    Lock(Lock&& o) noexcept : gate_(std::exchange(o.gate_, nullptr)) {}
    Lock& operator=(Lock&& o) noexcept {
      if (this != &o) {
        reset();
        gate_ = std::exchange(o.gate_, nullptr);
      }
      return *this;
    }
    ~Lock() { reset(); }
    void reset() {
      if (gate_ != nullptr) std::exchange(gate_, nullptr)->release();
    }

   private:
    Gate* gate_ = nullptr;
  };

  net::awaitable<Lock> acquire();

 private:
  void release();

  net::any_io_executor ex_;
  bool held_ = false;
  // Each waiter's timer; release() hands the gate to the front one by cancelling its wait.
  std::deque<std::shared_ptr<net::steady_timer>> waiters_;
};

// Opens the display lazily, the first time a request needs it, and keeps the connection for the
// agent's life (reopened only if it was lost). Single-threaded, like the rest of the agent.
class Desktop {
 public:
  // `display_name` returns ":N" once Xvfb is up, "" before.
  Desktop(net::any_io_executor ex, std::function<std::string()> display_name);
  ~Desktop();

  // Opens the connection if needed; kUnavailable ("display_not_ready") before Xvfb is up.
  Result<void> open();
  // Only after a successful open().
  vnc::Size screen_size() const;
  vnc::Input& input();

  // Region checked against the screen, size against kMaxImagePixels; then grab, scale, encode.
  Result<EncodedImage> screenshot(const ShotSpec& spec);

  Gate& gate() { return gate_; }

 private:
  void close();

  std::function<std::string()> display_name_;
  Gate gate_;
  // Declared in dependency order: capture and input point into the display.
  std::optional<vnc::Display> display_;
  std::optional<vnc::Capturer> capturer_;
  std::optional<vnc::Input> input_;
  vnc::Image frame_;  // reused between grabs
};

}  // namespace cabin::agent
