// AgentState: the health the supervisor writes and requests read or await.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "common/notifier.h"

namespace cabin::agent {

enum class Phase { kStarting, kReady, kFailed };

struct DevToolsEndpoint {
  uint16_t port = 0;
  std::string browser_path;  // "/devtools/browser/<uuid>"
};

struct HealthSnapshot {
  Phase phase = Phase::kStarting;
  std::string error;    // when failed
  std::string display;  // ":N" once Xvfb is up
  int width = 0;
  int height = 0;
  std::optional<DevToolsEndpoint> devtools;  // when ready
  // Chromium's window is on the display and its page draws frames: input reaches the page.
  bool desktop_ready = false;
};

class AgentState {
 public:
  AgentState(net::any_io_executor ex, int width, int height);

  const HealthSnapshot& snapshot() const { return snap_; }
  void set_display(std::string display);
  void set_ready(DevToolsEndpoint devtools);
  // The first failure wins; later ones are only logged by their callers.
  void set_failed(std::string error);
  void set_desktop_ready();
  // Waits until the phase is no longer kStarting or the timeout passes.
  net::awaitable<void> wait_settled(std::chrono::milliseconds timeout);
  // While the browser is ready but its desktop not yet, waits until it is (or the start
  // failed, or the timeout passed); else returns at once.
  net::awaitable<void> wait_desktop(std::chrono::milliseconds timeout);

 private:
  HealthSnapshot snap_;
  Notifier changed_;
};

std::string health_json(const HealthSnapshot& s);

}  // namespace cabin::agent
