// Fuzz target: DevTools discovery answers from the guest, rewritten for clients.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cdp-bridge/discovery.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::json;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // Every URL a client is told to connect to is cabind's. The guest's other fields are copied as
  // strings, so text in them that looks like a URL is only text.
  if (auto v = cabin::cdp::rewrite_version(in, "ws://h/cdp")) {
    auto j = json::parse(*v);
    if (j.at("webSocketDebuggerUrl") != "ws://h/cdp") __builtin_trap();
    for (const auto& [key, value] : j.items()) {
      if (!value.is_string()) __builtin_trap();
    }
  }
  if (auto l = cabin::cdp::rewrite_list(in, "ws://h/page/", "?token=t")) {
    for (const auto& target : json::parse(*l)) {
      if (target.contains("devtoolsFrontendUrl")) __builtin_trap();
      auto url = target.find("webSocketDebuggerUrl");
      if (url != target.end() &&
          *url != "ws://h/page/" + target.at("id").get<std::string>() + "?token=t") {
        __builtin_trap();
      }
    }
  }
  return 0;
}
