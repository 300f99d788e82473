// Fuzz target: what cabin-agent parses from the host before acting: health, screenshot and
// frame-stream queries and CONNECT targets.
#include <cstdint>
#include <string_view>

#include "vm-images/agent/desktop.h"
#include "vm-images/agent/frames.h"
#include "vm-images/agent/requests.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)cabin::agent::parse_health_query(in);
  (void)cabin::agent::parse_screenshot_query(in);
  auto frames = cabin::agent::parse_frames_query(in);
  if (frames && (frames->fps < 1 || frames->fps > 60)) __builtin_trap();
  auto target = cabin::agent::parse_connect_target(in);
  if (target && target->port == 0) __builtin_trap();  // port 0 is never a tunnel target
  return 0;
}
