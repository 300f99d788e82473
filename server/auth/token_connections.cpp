#include "server/auth/token_connections.h"

#include <vector>

namespace cabin::auth {

TokenConnections::Registration& TokenConnections::Registration::operator=(
    Registration&& o) noexcept {
  if (this != &o) {
    reset();
    state_ = std::move(o.state_);
    id_ = o.id_;
    o.id_ = 0;
  }
  return *this;
}

void TokenConnections::Registration::reset() {
  if (id_ == 0) return;
  if (auto s = state_.lock()) {
    auto* impl = static_cast<Impl*>(s.get());
    auto it = impl->entries.find(id_);
    if (it != impl->entries.end()) {
      if (it->second.timer) it->second.timer->cancel();
      impl->entries.erase(it);
    }
  }
  id_ = 0;
  state_.reset();
}

TokenConnections::TokenConnections(net::any_io_executor ex)
    : ex_(std::move(ex)), impl_(std::make_shared<Impl>()) {}

TokenConnections::~TokenConnections() {
  for (auto& [_, e] : impl_->entries) {
    if (e.timer) e.timer->cancel();
  }
}

TokenConnections::Registration TokenConnections::add(Options options, Closer close) {
  uint64_t id = impl_->next_id++;
  Entry e{std::move(options.session_id), std::move(options.tag), std::move(close), nullptr};
  if (options.close_after) {
    e.timer = std::make_unique<net::steady_timer>(ex_, *options.close_after);
    std::weak_ptr<Impl> weak = impl_;
    e.timer->async_wait([weak, id](boost::system::error_code ec) {
      if (ec) return;
      auto impl = weak.lock();
      if (!impl) return;
      auto it = impl->entries.find(id);
      if (it == impl->entries.end()) return;
      // Taken out first: the closer may end the connection, whose Registration then finds
      // nothing to remove. (Destroying the timer inside its own handler is allowed.)
      Closer c = std::move(it->second.close);
      impl->entries.erase(it);
      c();
    });
  }
  impl_->entries.emplace(id, std::move(e));
  return Registration(std::weak_ptr<void>(std::static_pointer_cast<void>(impl_)), id);
}

size_t TokenConnections::close_if(const std::function<bool(const Entry&)>& pred) {
  std::vector<Closer> closers;
  for (auto it = impl_->entries.begin(); it != impl_->entries.end();) {
    if (pred(it->second)) {
      if (it->second.timer) it->second.timer->cancel();
      closers.push_back(std::move(it->second.close));
      it = impl_->entries.erase(it);
    } else {
      ++it;
    }
  }
  // Called after the map is settled: closing may destroy Registrations, which look entries up.
  for (auto& c : closers) c();
  return closers.size();
}

size_t TokenConnections::close_session(std::string_view session_id) {
  return close_if([&](const Entry& e) { return e.session_id == session_id; });
}

size_t TokenConnections::close_tag(std::string_view session_id, std::string_view tag) {
  return close_if([&](const Entry& e) { return e.session_id == session_id && e.tag == tag; });
}

size_t TokenConnections::count(std::string_view session_id) const {
  size_t n = 0;
  for (const auto& [_, e] : impl_->entries) n += e.session_id == session_id;
  return n;
}

}  // namespace cabin::auth
