// Exec: runs one command for POST /agent/v1/exec with pipes, output caps and a timeout.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "common/result.h"
#include "vm-images/agent/requests.h"

namespace cabin::agent {

namespace net = boost::asio;

struct ExecResult {
  std::optional<int> exit_code;  // set when the command exited
  std::optional<int> signal;     // set when a signal ended it
  bool timed_out = false;
  std::string stdout_data;
  std::string stderr_data;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  int64_t duration_ms = 0;
};

struct ExecOptions {
  // After the command exits, how long to keep reading output that its leftover background
  // processes may still hold open; then the pipes are closed.
  std::chrono::milliseconds drain_grace{200};
};

// Errors: spawn_failed (400) when the command cannot start. Expects SIGPIPE to be ignored (the
// stdin pipe breaks when a command exits without reading it).
net::awaitable<Result<ExecResult>> run_exec(ExecSpec spec, ExecOptions opts = {});

// The response body; bytes that are not valid UTF-8 are replaced.
std::string exec_result_json(const ExecResult& r);

}  // namespace cabin::agent
