// Fuzz target: cabind's HTTP request parsing with its header and body limits, then routing.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstdint>

#include "server/api/router.h"
#include "server/http/server.h"

namespace http = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(cabin::http_api::kMaxHeaderBytes);
  parser.body_limit(cabin::http_api::kMaxBodyBytes);
  parser.eager(true);
  boost::system::error_code ec;
  parser.put(boost::asio::buffer(data, size), ec);
  if (!ec && parser.is_done()) {
    auto& req = parser.get();
    if (req.body().size() > cabin::http_api::kMaxBodyBytes) __builtin_trap();
    (void)cabin::api::route(req.method_string(), req.target());
  }
  return 0;
}
