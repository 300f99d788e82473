// Exec: runs one command for POST /agent/v1/exec with pipes, output caps and a timeout.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <sys/types.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "common/agent_protocol.h"
#include "common/result.h"

namespace cabin::agent {

namespace net = boost::asio;

using agent_protocol::ExecRequest;
using agent_protocol::ExecResult;

struct ExecOptions {
  // After the command exits, how long to keep reading output that its leftover background
  // processes may still hold open; then the pipes are closed.
  std::chrono::milliseconds drain_grace{200};
  // Non-empty: commands start through this binary's exec_filter helper (`HELPER --exec-filtered
  // USER PATH ARGV...`), so they run under the exec filter; Chromium, started elsewhere, does not.
  std::string filter_helper;
  // With filter_helper: the uid commands run as. The agent holds CAP_SETUID in its permitted
  // set (the namespace sandbox's PID 1 gives it) and lends it to the helper alone.
  std::optional<uid_t> exec_uid;
};

// Errors: spawn_failed (400) when the command cannot start. Expects SIGPIPE to be ignored (the
// stdin pipe breaks when a command exits without reading it).
net::awaitable<Result<ExecResult>> run_exec(ExecRequest spec, ExecOptions opts = {});

}  // namespace cabin::agent
