// QMP client: one short connection per command to a QEMU's monitor socket (QEMU serves one client
// at a time; cabind never holds it open).
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin::drivers {

namespace net = boost::asio;

enum class QmpKind { kGreeting, kReturn, kError, kEvent, kInvalid };

struct QmpMessage {
  QmpKind kind = QmpKind::kInvalid;
  std::string text;  // kError: the error's class and description; kEvent: its name
};

// Classifies one line QEMU sent (each QMP message is one JSON object on one line).
QmpMessage parse_qmp_line(std::string_view line);

// Connects to <dir>/<socket_name>, negotiates capabilities and runs `command` (e.g. "stop").
// Completes with an error on a QMP error, a closed socket, or after `timeout` in all.
net::awaitable<Result<void>> qmp_execute(net::any_io_executor ex, std::filesystem::path dir,
                                         std::string socket_name, std::string command,
                                         std::chrono::milliseconds timeout);

}  // namespace cabin::drivers
