// The API's OpenAPI document (docs/openapi.json), built into cabind and served at /openapi.json.
#pragma once

#include <string_view>

namespace cabin::api {

std::string_view openapi_document();

}  // namespace cabin::api
