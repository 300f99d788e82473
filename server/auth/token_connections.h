// TokenConnections: the long-lived connections a capability token let in (CDP bridges, frame and
// VNC streams, previews), per session, so revoking a session's tokens, deleting a preview or a
// grant's expiry closes them.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace cabin::auth {

namespace net = boost::asio;

class TokenConnections {
 public:
  // Closes the connection (for example: closes its socket). Called at most once, on the
  // registry's executor, and never after the Registration is gone.
  using Closer = std::function<void()>;

  struct Options {
    std::string session_id;
    std::string tag;  // what else may close it: a preview id; empty: only the session
    // Closed when this much time has passed (a grant's expiry); nullopt: never by time.
    std::optional<std::chrono::steady_clock::duration> close_after;
  };

  // Unregisters when destroyed; holds only a weak reference, so it may outlive the registry.
  class Registration {
   public:
    Registration() = default;
    Registration(Registration&& o) noexcept : state_(std::move(o.state_)), id_(o.id_) {
      o.id_ = 0;
    }
    Registration& operator=(Registration&& o) noexcept;
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;
    ~Registration() { reset(); }
    void reset();
    // False once the connection was closed through the registry (or never registered).
    bool active() const;

   private:
    friend class TokenConnections;
    Registration(std::weak_ptr<void> state, uint64_t id) : state_(std::move(state)), id_(id) {}
    std::weak_ptr<void> state_;
    uint64_t id_ = 0;
  };

  explicit TokenConnections(net::any_io_executor ex);
  ~TokenConnections();
  TokenConnections(const TokenConnections&) = delete;
  TokenConnections& operator=(const TokenConnections&) = delete;

  [[nodiscard]] Registration add(Options options, Closer close);
  // Close every registered connection of the session; returns how many.
  size_t close_session(std::string_view session_id);
  // Close those of the session registered with `tag`.
  size_t close_tag(std::string_view session_id, std::string_view tag);
  size_t count(std::string_view session_id) const;

 private:
  struct Entry {
    std::string session_id;
    std::string tag;
    Closer close;
    std::unique_ptr<net::steady_timer> timer;
  };
  struct Impl {
    std::map<uint64_t, Entry> entries;
    uint64_t next_id = 1;
  };
  size_t close_if(const std::function<bool(const Entry&)>& pred);

  net::any_io_executor ex_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cabin::auth
