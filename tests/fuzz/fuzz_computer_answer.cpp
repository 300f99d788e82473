// Fuzz target: the agent's (hostile) answers to a computer-use batch.
#include <cstdint>
#include <string_view>

#include "server/api/computer_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto out = cabin::api::check_computer_answer(in, 4, {1280, 800},
                                               cabin::computer::Size{1024, 640});
  if (out) {
    for (const auto& r : (*out)["results"]) {
      if (r.contains("x") && (r["x"].get<int64_t>() < 0 || r["x"].get<int64_t>() >= 1024)) {
        __builtin_trap();  // positions always land in the model space
      }
    }
  }
  return 0;
}
