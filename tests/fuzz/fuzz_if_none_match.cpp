// Fuzz target: If-None-Match as a client sends it, against one static file of the web UI.
#include <cstdint>
#include <string_view>

#include "server/http/static_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const cabin::http_api::StaticFile kFile{"text/html; charset=utf-8", "<p>hi</p>",
                                                 "\"00112233aabbccdd-9\"", false};
  std::string_view header(reinterpret_cast<const char*>(data), size);
  auto res = cabin::http_api::static_response(kFile, header);
  bool not_modified = res.result() == boost::beast::http::status::not_modified;
  // 304 only for a list that names the tag (or "*"); a 200 always carries the whole file.
  if (not_modified && header.find("00112233aabbccdd-9") == std::string_view::npos &&
      header.find('*') == std::string_view::npos) {
    __builtin_trap();
  }
  if (!not_modified && res.body() != kFile.body) __builtin_trap();
  return 0;
}
