// The agent's frame stream: GET /agent/v1/frames sends an encoded frame whenever the screen
// changes, at most `fps` a second, and none while it is still (common/frame_stream.h).
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "vm-images/agent/desktop.h"
#include "vnc/capture.h"
#include "vnc/damage.h"
#include "vnc/display.h"

namespace cabin::agent {

struct FrameSpec {
  ShotSpec shot;
  int fps = 15;
};

// The screenshot query (parse_screenshot_query) plus fps (1..kMaxFps).
Result<FrameSpec> parse_frames_query(std::string_view query);

// One stream's own X connection, so damage events of one stream never reach another.
struct FrameCapture {
  vnc::Display display;
  vnc::Capturer capturer;
  vnc::DamageTracker damage;
};

// Opens the connection and checks the spec against the screen: the errors a request can get
// before the stream starts.
Result<std::unique_ptr<FrameCapture>> open_frame_capture(const std::string& display_name,
                                                         const FrameSpec& spec);

// Answers 200 and streams frames on `socket` until the peer goes away or the display does.
net::awaitable<void> serve_frames(net::generic::stream_protocol::socket socket,
                                  std::unique_ptr<FrameCapture> capture, FrameSpec spec);

}  // namespace cabin::agent
