// Fuzz target: the route table and query decoding (method byte, then the request target).
#include <cstdint>
#include <string_view>

#include "server/api/ids.h"
#include "server/api/router.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* kMethods[] = {"GET", "POST", "DELETE", "PUT"};
  std::string_view target(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto r = cabin::api::route(kMethods[data[0] % 4], target);
  if (r && !r->session_id.empty() && !cabin::api::valid_session_id(r->session_id)) {
    __builtin_trap();  // no invalid id ever reaches a handler
  }
  if (r && r->id == cabin::api::RouteId::kUiAsset && !cabin::api::valid_asset_name(r->asset)) {
    __builtin_trap();  // a UI file name is always one plain name
  }
  return 0;
}
