// ASCII case-insensitive comparison for protocol tokens (header names and values, media types).
// Boost 1.74's beast::iequals reads one byte past both strings once they differ only in case,
// so nothing here uses it.
#pragma once

#include <string_view>

namespace cabin {

constexpr char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

constexpr bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

}  // namespace cabin
