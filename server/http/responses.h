// JSON responses and the one place where an Error becomes an HTTP answer.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include "common/result.h"

namespace cabin::http_api {

namespace http = boost::beast::http;
using Response = http::response<http::string_body>;

Response json_response(http::status status, const nlohmann::json& body);
// The one way an Error becomes an answer: its Errc gives the status (server/api/errors.h lists
// every code).
Response error_response(const Error& e);

// The same error as a small HTML page, for addresses a person opens in a browser (the live view
// link): same status and code, the message in words, no script.
Response error_page(const Error& e);

}  // namespace cabin::http_api
