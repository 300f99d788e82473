#include "server/http/write_watch.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/log.h"

namespace cabin::http_api {

net::awaitable<void> watch_writes(std::shared_ptr<WriteWatch> w, ClientStream& socket,
                                  std::chrono::steady_clock::duration timeout, std::string what) {
  auto next = timeout;
  while (!w->ended) {
    w->timer.expires_after(next);
    boost::system::error_code ec;
    co_await w->timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (w->ended) co_return;
    next = timeout;
    if (!w->writing) continue;
    const auto waited = std::chrono::steady_clock::now() - w->since;
    if (waited < timeout) {
      next = timeout - waited;
      continue;
    }
    logger("http")->info("{} read nothing for {} s: closing it", what,
                std::chrono::duration_cast<std::chrono::seconds>(timeout).count());
    // The pending write ends, and with it the client.
    socket.shutdown(net::socket_base::shutdown_both, ec);
    socket.tcp().cancel();
    co_return;
  }
}

}  // namespace cabin::http_api
