// Percent-encoding of URL query components.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin {

// The value of one hex digit, or -1.
int hex_digit(char c);
// Percent-decoding of one query component; '+' is a space unless `plus_is_space` is false (a
// URL's userinfo). Fails on bad escapes.
Result<std::string> percent_decode(std::string_view s, bool plus_is_space = true);
// Percent-encoding of everything but RFC 3986's unreserved characters (A-Z a-z 0-9 - . _ ~),
// with upper-case hex: safe in a query component and in a form-encoded body.
std::string percent_encode(std::string_view s);

}  // namespace cabin
