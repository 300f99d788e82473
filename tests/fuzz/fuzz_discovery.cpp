// Fuzz target: DevTools discovery answers from the guest, rewritten for clients.
#include <cstdint>
#include <string_view>

#include "cdp-bridge/discovery.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto v = cabin::cdp::rewrite_version(in, "ws://h/cdp");
  auto l = cabin::cdp::rewrite_list(in, "ws://h/page/", "?token=t");
  // Nothing the guest says may point a client back at the browser's own port.
  if (v && v->find("ws://127.0.0.1") != std::string::npos) __builtin_trap();
  if (l && l->find("\"webSocketDebuggerUrl\":\"ws://127") != std::string::npos) __builtin_trap();
  return 0;
}
