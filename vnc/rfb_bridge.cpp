#include "vnc/rfb_bridge.h"

namespace cabin::vnc {

bool offers_binary(std::string_view protocols) {
  while (!protocols.empty()) {
    const size_t comma = protocols.find(',');
    std::string_view item = protocols.substr(0, comma);
    protocols = comma == std::string_view::npos ? std::string_view() : protocols.substr(comma + 1);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item == kRfbSubprotocol) return true;
  }
  return false;
}

}  // namespace cabin::vnc
