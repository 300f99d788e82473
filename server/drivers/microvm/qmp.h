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

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace cabin::drivers {

namespace net = boost::asio;

enum class QmpKind { kGreeting, kReturn, kError, kEvent, kInvalid };

struct QmpMessage {
  QmpKind kind = QmpKind::kInvalid;
  std::string text;  // kError: the error's class and description; kEvent: its name
  nlohmann::json value;  // kReturn: what the command returned
};

// Classifies one line QEMU sent (each QMP message is one JSON object on one line).
QmpMessage parse_qmp_line(std::string_view line);

// Connects to <dir>/<socket_name>, negotiates capabilities and runs `command` (e.g. "stop").
// Completes with an error on a QMP error, a closed socket, or after `timeout` in all.
net::awaitable<Result<void>> qmp_execute(net::any_io_executor ex, std::filesystem::path dir,
                                         std::string socket_name, std::string command,
                                         std::chrono::milliseconds timeout);

// Where each vCPU (the first kMaxReportedVcpus) stands, from the monitor's register dump: one
// line per CPU, "CPU#<n> RIP=<hex> HLT=<0|1>". For a guest that stopped making progress: a halted
// CPU waits for an interrupt, one with HLT=0 runs (or spins) at RIP.
constexpr int kMaxReportedVcpus = 8;
net::awaitable<Result<std::string>> qmp_vcpu_states(net::any_io_executor ex,
                                                    std::filesystem::path dir,
                                                    std::string socket_name, int vcpus,
                                                    std::chrono::milliseconds timeout);
// The RIP= and HLT= fields of one CPU's `info registers` text ("" when it has none).
std::string vcpu_state_of(std::string_view info_registers);

// A VM's device state saved for copy-on-write restores: the VM is stopped, and with
// x-ignore-shared only what is not in its shared RAM file goes into the stream, written to
// `state_fd` (handed to QEMU over the socket: its sandbox forbids the exec: URIs). Answers once
// QEMU says the migration completed; the VM stays stopped.
net::awaitable<Result<void>> qmp_save_state(net::any_io_executor ex, std::filesystem::path dir,
                                            std::string socket_name, int state_fd,
                                            std::chrono::milliseconds timeout);
// The other side, in a QEMU started with `-incoming defer` and the same RAM file mapped
// privately: loads the state from `state_fd`, then lets the VM run.
net::awaitable<Result<void>> qmp_restore_state(net::any_io_executor ex, std::filesystem::path dir,
                                               std::string socket_name, int state_fd,
                                               std::chrono::milliseconds timeout);

}  // namespace cabin::drivers
