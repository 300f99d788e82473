#include "vnc/rfb_bridge.h"

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket.hpp>
#include <memory>
#include <span>

#include "vnc/rfb_bridge_link.h"

namespace cabin::vnc {

using tcp = net::ip::tcp;
using namespace bridge_detail;

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
