// Computer-use executor: runs a superset Batch (common/computer_actions.h) on the Desktop.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/computer_actions.h"
#include "vm-images/agent/desktop.h"

namespace cabin::agent {

// Pixel scroll distances become wheel notches at this rate: round(|d| / 100), at least 1 for a
// non-zero distance, at most kMaxScrollNotches per axis.
inline constexpr int64_t kScrollPixelsPerNotch = 100;
int64_t scroll_notches(int64_t amount, computer::ScrollUnit unit);

struct ActionFailure {
  size_t index = 0;
  std::string op;
  std::string code;
  std::string message;
};

struct ComputerOutcome {
  nlohmann::json results = nlohmann::json::array();  // one object per action that finished
  std::optional<nlohmann::json> screenshot;          // screenshot_after
  std::optional<ActionFailure> failure;  // the first action that failed; the rest skipped
};

// The screenshot result shape: {"op"?, "media_type", "data" (base64), "width", "height"}.
nlohmann::json image_json(const EncodedImage& img);

// Gives files to a page's file input (the upload action); done by the browser, not the desktop.
using Uploader = std::function<net::awaitable<Result<void>>(const computer::Upload&)>;

// Runs the actions in order. The caller holds the Desktop's gate and has opened it. Waits, holds
// and paced typing suspend on timers, so the io thread keeps serving other requests meanwhile.
// Keys and modifiers the executor presses are released before it returns, also on failure.
// Without an uploader, upload actions fail.
net::awaitable<ComputerOutcome> run_computer(Desktop& desktop, const computer::Batch& batch,
                                             const Uploader* upload = nullptr);

// The response body: {"results":[...], "screenshot"?: {...}, "error"?: {index, op, code, message}}.
nlohmann::json to_json(const ComputerOutcome& outcome);

}  // namespace cabin::agent
