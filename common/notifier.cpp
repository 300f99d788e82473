#include "common/notifier.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace cabin {

void Notifier::notify_all() {
  for (auto* t : *waiters_) t->cancel();
}

net::awaitable<bool> Notifier::wait_until(Clock::time_point deadline) {
  net::steady_timer timer(ex_, deadline);
  // Unregisters even when the frame is destroyed while suspended (io_context teardown).
  // Shares the list so frames that outlive the Notifier at teardown stay safe.
  struct Registration {
    std::shared_ptr<std::list<net::steady_timer*>> list;
    std::list<net::steady_timer*>::iterator it;
    ~Registration() { list->erase(it); }
  } reg{waiters_, waiters_->insert(waiters_->end(), &timer)};
  boost::system::error_code ec;
  co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  // A cancel that lands after expiry reads as "deadline passed"; callers re-check anyway.
  co_return ec == net::error::operation_aborted;
}

}  // namespace cabin
