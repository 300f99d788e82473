// WriteWatch: cuts a streaming client off when one write has been pending too long, so a client
// that never reads costs a socket buffer and nothing more.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "server/http/client_stream.h"

namespace cabin::http_api {

// One timer per client, which looks at the pending write when it fires. The client marks each
// write with begin()/done() and calls end() (which cancels) before its stream goes.
struct WriteWatch {
  explicit WriteWatch(const net::any_io_executor& ex) : timer(ex) {}
  net::steady_timer timer;
  bool writing = false;
  std::chrono::steady_clock::time_point since;
  bool ended = false;
  void begin() {
    writing = true;
    since = std::chrono::steady_clock::now();
  }
  void done() { writing = false; }
  void end() {
    ended = true;
    timer.cancel();
  }
};

// Runs until `w` ends; when a write has been pending for `timeout`, logs that `what` read nothing
// and shuts the socket, which ends the write and with it the client.
net::awaitable<void> watch_writes(std::shared_ptr<WriteWatch> w, ClientStream& socket,
                                  std::chrono::steady_clock::duration timeout, std::string what);

}  // namespace cabin::http_api
