// ConnectionSet: every client connection cabind holds, taken-over ones (CDP, RFB, frames,
// preview tunnels) included, so that shutdown can reach them all: ask each to go away on its own
// executor (a WebSocket with a close frame, code 1001), wait for them to leave with a deadline,
// then stop the threads.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>

namespace cabin::http_api {

namespace net = boost::asio;

class ConnectionSet {
  struct Entry {
    std::mutex mutex;  // guards `ex`, which rebind() changes
    net::any_io_executor ex;
    std::function<void()> close;       // touched only on `ex`
    std::function<void()> going_away;  // likewise; empty: `close` does for it
  };

 public:
  // A connection's place in the set; leaving on destruction, on the connection's executor.
  class Member {
   public:
    Member() = default;
    Member(Member&& o) noexcept = default;
    Member& operator=(Member&& o) noexcept;
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;
    ~Member() { leave(); }

    // The connection now runs on `ex` and closes by `close`. Called where it ran until now,
    // with nothing pending on it.
    void rebind(net::any_io_executor ex, std::function<void()> close);
    // Asks the connection to close, on its executor, if it is still there. For the control
    // executor (revocation, expiry); it stays valid after the connection moved or ended.
    std::function<void()> closer() const;
    // How the connection leaves when the server goes away, if not by `close`: a WebSocket says
    // so with a close frame. Set on the connection's executor, after any rebind().
    void on_going_away(std::function<void()> f);

   private:
    friend class ConnectionSet;
    struct State;
    Member(std::shared_ptr<State> set, std::shared_ptr<Entry> e)
        : set_(std::move(set)), entry_(std::move(e)) {}
    void leave();
    std::shared_ptr<State> set_;
    std::shared_ptr<Entry> entry_;
  };

  explicit ConnectionSet(net::any_io_executor control);
  ConnectionSet(const ConnectionSet&) = delete;
  ConnectionSet& operator=(const ConnectionSet&) = delete;

  // `close` ends the connection's I/O; it is called on `ex`, the executor the connection runs
  // on, and never after the Member is gone.
  Member join(net::any_io_executor ex, std::function<void()> close);

  // Asks every connection to go away, each on its own executor: by its going-away function
  // where it has one, else by closing. Connections that join later are asked to close at once.
  void go_away_all();
  size_t size() const;
  // Waits on the control executor until every connection has left or `deadline` passed;
  // true when they all left.
  net::awaitable<bool> wait_empty(std::chrono::steady_clock::time_point deadline);

 private:
  static void post_close(const std::shared_ptr<Entry>& e, bool going_away = false);

  // Shared with the members: a coroutine frame holding one may be destroyed after the set.
  std::shared_ptr<Member::State> state_;
};

struct ConnectionSet::Member::State {
  net::any_io_executor control;
  std::mutex mutex;
  std::set<std::shared_ptr<Entry>> entries;
  bool closing = false;
  std::function<void()> on_empty;  // the waiter, run on `control`
};

}  // namespace cabin::http_api
