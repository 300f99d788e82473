#include "server/http/responses.h"

#include <boost/beast/version.hpp>

namespace cabin::http_api {

Response json_response(http::status status, const nlohmann::json& body) {
  Response res{status, 11};
  res.set(http::field::server, "cabind/" CABIN_VERSION);
  res.set(http::field::content_type, "application/json");
  res.set(http::field::cache_control, "no-store");
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  res.body().push_back('\n');
  res.prepare_payload();
  return res;
}

Response error_response(http::status status, const std::string& code, const std::string& message) {
  auto res = json_response(status, {{"error", {{"code", code}, {"message", message}}}});
  if (status == http::status::unauthorized) res.set(http::field::www_authenticate, "Bearer");
  return res;
}

Response error_response(const Error& e) {
  return error_response(static_cast<http::status>(http_status(e.errc)), e.code, e.message);
}

}  // namespace cabin::http_api
