// HttpServer: the agent's HTTP/1.1 listener (UNIX or TCP): auth, routing, limits, CONNECT hand-off.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/agent_protocol.h"
#include "common/result.h"
#include "vm-images/agent/agent_state.h"
#include "vm-images/agent/browser_events.h"
#include "vm-images/agent/computer.h"
#include "vm-images/agent/egress_door.h"
#include "vm-images/agent/exec.h"
#include "vm-images/agent/files.h"
#include "vm-images/agent/recorder.h"
#include "vm-images/agent/requests.h"

namespace cabin::agent {

namespace net = boost::asio;

struct HttpServerOptions {
  ListenAddress listen;
  std::string secret;
  size_t header_limit = 16 * 1024;
  size_t body_limit = 4 << 20;  // a browser state's (agent_protocol::kMaxStateBytes)
  // How long a connection may take to send a request (and sit idle between requests).
  std::chrono::milliseconds read_timeout{60000};
  size_t max_connections = 256;
  size_t max_concurrent_execs = 32;
  ExecOptions exec;
  // The microVM's door out (kEgressWaitPath); null: the agent has none.
  EgressDoor* egress_door = nullptr;
  // Closes the browser so that it writes its profile out (kBrowserClosePath); empty: refused.
  std::function<net::awaitable<Result<void>>()> close_browser;
  // Makes a VM restored from a snapshot its own machine (kRestoredPath) before the agent takes
  // the request's secret; empty: refused (the agent did not start in a VM).
  std::function<net::awaitable<Result<void>>(const agent_protocol::RestoredRequest&)> restored;
  // The X clipboard (kClipboardPath), owned by the RFB server: nullopt and false while there is
  // none (no display yet, or started without one).
  std::function<std::optional<std::string>()> clipboard_get;
  std::function<bool(std::string)> clipboard_set;
  // The browser's events (kEventsPath); null: refused.
  BrowserEvents* events = nullptr;
  // The files the API may reach (kFilesPath); null: refused.
  const FileRoots* files = nullptr;
  // The computer batch's upload action; empty: it fails.
  Uploader upload;
  // Screen recordings (kRecordingsPath); null: refused.
  Recorder* recorder = nullptr;
};

class HttpServer {
 public:
  HttpServer(net::any_io_executor ex, HttpServerOptions opts, AgentState& state);
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer();

  // Binds and listens (a stale UNIX socket file is replaced), then accepts in the background.
  Result<void> start();
  // Stops accepting; live connections end on their own or with the io_context.
  void stop();
  // The bound TCP port (useful with tcp:HOST:0); 0 for UNIX sockets.
  uint16_t tcp_port() const { return tcp_port_; }

  struct Conn;  // state shared with connection coroutines

 private:
  net::awaitable<void> accept_loop();

  net::any_io_executor ex_;
  HttpServerOptions opts_;
  std::shared_ptr<Conn> shared_;
  net::basic_socket_acceptor<net::generic::stream_protocol> acceptor_;
  uint16_t tcp_port_ = 0;
};

}  // namespace cabin::agent
