#include "server/http/connection_set.h"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace cabin::http_api {

ConnectionSet::Member& ConnectionSet::Member::operator=(Member&& o) noexcept {
  if (this != &o) {
    leave();
    set_ = std::exchange(o.set_, nullptr);
    entry_ = std::move(o.entry_);
  }
  return *this;
}

void ConnectionSet::Member::leave() {
  if (!entry_) return;
  entry_->close = nullptr;  // a close still queued on this executor finds nothing to do
  std::function<void()> wake;
  {
    std::lock_guard lock(set_->mutex_);
    set_->entries_.erase(entry_);
    if (set_->entries_.empty()) wake = std::move(set_->on_empty_);
  }
  if (wake) net::post(set_->control_, std::move(wake));
  entry_.reset();
}

void ConnectionSet::Member::rebind(net::any_io_executor ex, std::function<void()> close) {
  if (!entry_) return;
  {
    std::lock_guard lock(entry_->mutex);
    entry_->ex = std::move(ex);
  }
  entry_->close = std::move(close);
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
    std::lock_guard lock(mutex_);
    entries_.insert(e);
    closing = closing_;
  }
  if (closing) post_close(e);
  return Member(this, std::move(e));
}

void ConnectionSet::post_close(const std::shared_ptr<Entry>& e) {
  net::any_io_executor ex;
  {
    std::lock_guard lock(e->mutex);
    ex = e->ex;
  }
  net::post(ex, [e] {
    if (e->close) e->close();
  });
}

void ConnectionSet::close_all() {
  std::set<std::shared_ptr<Entry>> all;
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
    all = entries_;
  }
  for (const auto& e : all) post_close(e);
}

size_t ConnectionSet::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

net::awaitable<bool> ConnectionSet::wait_empty(std::chrono::steady_clock::time_point deadline) {
  auto timer = std::make_shared<net::steady_timer>(control_, deadline);
  {
    std::lock_guard lock(mutex_);
    if (entries_.empty()) co_return true;
    on_empty_ = [timer] { timer->cancel(); };
  }
  boost::system::error_code ec;
  co_await timer->async_wait(net::redirect_error(net::use_awaitable, ec));
  std::lock_guard lock(mutex_);
  on_empty_ = nullptr;
  co_return entries_.empty();
}

}  // namespace cabin::http_api
