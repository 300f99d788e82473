#include "server/http/connection_set.h"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace cabin::http_api {

ConnectionSet::ConnectionSet(net::any_io_executor control)
    : state_(std::make_shared<Member::State>()) {
  state_->control = std::move(control);
}

ConnectionSet::Member& ConnectionSet::Member::operator=(Member&& o) noexcept {
  if (this != &o) {
    leave();
    set_ = std::move(o.set_);
    entry_ = std::move(o.entry_);
  }
  return *this;
}

void ConnectionSet::Member::leave() {
  if (!entry_) return;
  entry_->close = nullptr;  // a close still queued on this executor finds nothing to do
  entry_->going_away = nullptr;
  std::function<void()> wake;
  {
    std::lock_guard lock(set_->mutex);
    set_->entries.erase(entry_);
    if (set_->entries.empty()) wake = std::move(set_->on_empty);
  }
  if (wake) net::post(set_->control, std::move(wake));
  entry_.reset();
  set_.reset();
}

void ConnectionSet::Member::rebind(net::any_io_executor ex, std::function<void()> close) {
  if (!entry_) return;
  {
    std::lock_guard lock(entry_->mutex);
    entry_->ex = std::move(ex);
  }
  entry_->close = std::move(close);
}

void ConnectionSet::Member::on_going_away(std::function<void()> f) {
  if (entry_) entry_->going_away = std::move(f);
}

std::function<void()> ConnectionSet::Member::closer() const {
  return [weak = std::weak_ptr<Entry>(entry_)] {
    if (auto e = weak.lock()) post_close(e);
  };
}

ConnectionSet::Member ConnectionSet::join(net::any_io_executor ex, std::function<void()> close) {
  auto e = std::make_shared<Entry>();
  e->ex = std::move(ex);
  e->close = std::move(close);
  bool closing;
  {
    std::lock_guard lock(state_->mutex);
    state_->entries.insert(e);
    closing = state_->closing;
  }
  if (closing) post_close(e);
  return Member(state_, std::move(e));
}

void ConnectionSet::post_close(const std::shared_ptr<Entry>& e, bool going_away) {
  net::any_io_executor ex;
  {
    std::lock_guard lock(e->mutex);
    ex = e->ex;
  }
  net::post(ex, [e, going_away] {
    if (going_away && e->going_away) {
      e->going_away();
    } else if (e->close) {
      e->close();
    }
  });
}

void ConnectionSet::go_away_all() {
  std::set<std::shared_ptr<Entry>> all;
  {
    std::lock_guard lock(state_->mutex);
    state_->closing = true;
    all = state_->entries;
  }
  for (const auto& e : all) post_close(e, true);
}

size_t ConnectionSet::size() const {
  std::lock_guard lock(state_->mutex);
  return state_->entries.size();
}

net::awaitable<bool> ConnectionSet::wait_empty(std::chrono::steady_clock::time_point deadline) {
  auto timer = std::make_shared<net::steady_timer>(state_->control, deadline);
  {
    std::lock_guard lock(state_->mutex);
    if (state_->entries.empty()) co_return true;
    state_->on_empty = [timer] { timer->cancel(); };
  }
  boost::system::error_code ec;
  co_await timer->async_wait(net::redirect_error(net::use_awaitable, ec));
  std::lock_guard lock(state_->mutex);
  state_->on_empty = nullptr;
  co_return state_->entries.empty();
}

}  // namespace cabin::http_api
