// Deadline: closes a stream or socket when a time limit passes, so that a peer that stops
// answering cannot hold a coroutine forever.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>

namespace cabin {

// `Stream` has get_executor() and close(error_code&). The stream must outlive the Deadline, and
// both live on one executor: `active` is cleared before a queued handler can run.
template <typename Stream>
class Deadline {
 public:
  Deadline(Stream& s, std::chrono::milliseconds after)
      : state_(std::make_shared<State>(s.get_executor(), after)) {
    state_->timer.async_wait([&s, st = state_](boost::system::error_code ec) {
      if (!ec && st->active) {
        st->expired = true;
        s.close(ec);
      }
    });
  }
  ~Deadline() {
    state_->active = false;
    state_->timer.cancel();
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

  // Whether it closed the stream.
  bool expired() const { return state_->expired; }

 private:
  struct State {
    State(const boost::asio::any_io_executor& ex, std::chrono::milliseconds after)
        : timer(ex, after) {}
    boost::asio::steady_timer timer;
    bool active = true;
    bool expired = false;
  };
  std::shared_ptr<State> state_;
};

}  // namespace cabin
