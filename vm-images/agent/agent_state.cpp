#include "vm-images/agent/agent_state.h"

#include <nlohmann/json.hpp>

namespace cabin::agent {

AgentState::AgentState(net::any_io_executor ex, int width, int height) : changed_(std::move(ex)) {
  snap_.width = width;
  snap_.height = height;
}

void AgentState::set_display(std::string display) { snap_.display = std::move(display); }

void AgentState::set_ready(DevToolsEndpoint devtools) {
  if (snap_.phase != Phase::kStarting) return;
  snap_.phase = Phase::kReady;
  snap_.devtools = std::move(devtools);
  changed_.notify_all();
}

void AgentState::set_desktop_ready() {
  if (snap_.desktop_ready) return;
  snap_.desktop_ready = true;
  changed_.notify_all();
}

void AgentState::set_failed(std::string error) {
  if (snap_.phase == Phase::kFailed) return;
  snap_.phase = Phase::kFailed;
  snap_.error = std::move(error);
  snap_.devtools.reset();
  changed_.notify_all();
}

net::awaitable<void> AgentState::wait_settled(std::chrono::milliseconds timeout) {
  const auto deadline = Notifier::Clock::now() + timeout;
  while (snap_.phase == Phase::kStarting && Notifier::Clock::now() < deadline) {
    co_await changed_.wait_until(deadline);
  }
}

net::awaitable<void> AgentState::wait_desktop(std::chrono::milliseconds timeout) {
  const auto deadline = Notifier::Clock::now() + timeout;
  while (snap_.phase == Phase::kReady && !snap_.desktop_ready &&
         Notifier::Clock::now() < deadline) {
    co_await changed_.wait_until(deadline);
  }
}

std::string health_json(const HealthSnapshot& s) {
  nlohmann::json j;
  switch (s.phase) {
    case Phase::kStarting:
      j["state"] = "starting";
      break;
    case Phase::kReady:
      j["state"] = "ready";
      break;
    case Phase::kFailed:
      j["state"] = "failed";
      break;
  }
  if (s.phase == Phase::kFailed) j["error"] = s.error;
  if (!s.display.empty()) j["display"] = s.display;
  j["desktop_ready"] = s.desktop_ready;
  j["width"] = s.width;
  j["height"] = s.height;
  if (s.devtools) {
    j["devtools"] = {{"port", s.devtools->port}, {"browser_path", s.devtools->browser_path}};
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace cabin::agent
