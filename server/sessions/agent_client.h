// AgentClient: cabind's side of the cabin-agent protocol (docs/agent-protocol.md); every answer
// from the guest is size-limited and validated, since the guest is hostile.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "common/agent_protocol.h"
#include "common/computer_actions.h"
#include "common/result.h"
#include "server/api/computer_wire.h"
#include "server/drivers/sandbox_driver.h"

namespace cabin::sessions {

namespace net = boost::asio;
namespace http = boost::beast::http;

struct AgentHealth {
  std::string state;  // "starting", "ready", "failed"
  std::string error;
  int devtools_port = 0;
  std::string browser_path;  // "/devtools/browser/<uuid>"
};

// A CONNECT tunnel: `stream` carries raw bytes; `buffer` may hold bytes already read past the
// CONNECT answer, which belong to the tunnelled protocol.
struct Tunnel {
  drivers::AgentStream stream;
  boost::beast::flat_buffer buffer;
  std::optional<uint64_t> length;  // a stream's Content-Length, when its answer gave one
};

// What the agent answered an upload: the file's path, size and SHA-256.
struct StoredFile {
  std::string path;
  uint64_t size = 0;
  std::string sha256;
};

inline constexpr size_t kMaxAgentHeader = 16 * 1024;
// No answer is ever larger, whatever a request's own limit says.
inline constexpr size_t kMaxAgentBody = 64 * 1024 * 1024;
inline constexpr size_t kMaxHealthBody = 16 * 1024;
inline constexpr size_t kMaxAgentErrorBody = 64 * 1024;  // an error's JSON: a code and a message

// The code and message of an agent's error answer ({"error": {"code", "message"}}), cut to
// 64 and 1024 bytes; nullopt when the body is not that.
struct AgentErrorText {
  std::string code;
  std::string message;
};
std::optional<AgentErrorText> agent_error_message(std::string_view body);

// A screenshot the agent took: PNG or JPEG, and its grab and encode times when it sent them in
// the shape it sends them.
struct AgentImage {
  std::string content_type;
  std::string server_timing;
  std::string bytes;
};

// A computer batch's answer, checked: 200 with every result, or 422 with the results up to the
// action that failed.
struct ComputerAnswer {
  http::status status;
  nlohmann::json body;
};

class AgentClient {
 public:
  AgentClient(drivers::Sandbox& sandbox, std::string secret)
      : sandbox_(sandbox), secret_(std::move(secret)) {}
  const std::string& secret() const { return secret_; }

  // Parses the agent's health answer; waits up to wait_ms for it to leave "starting".
  net::awaitable<Result<AgentHealth>> health(int wait_ms);
  // Runs a command: its result, or 400 spawn_failed with the agent's reason.
  net::awaitable<Result<agent_protocol::ExecResult>> exec(const agent_protocol::ExecRequest& r);
  // Takes the browser's first page to `url` and answers once it got as far as `wait_until`
  // ("commit", "load", "networkidle"), within `timeout`.
  net::awaitable<Result<void>> navigate(const std::string& url, const std::string& wait_until,
                                        std::chrono::milliseconds timeout);
  // Makes the agent of a VM restored from a snapshot (which still has the snapshot's secret,
  // this client's) its own machine's, and speaks to it with the request's secret from then on.
  net::awaitable<Result<void>> restored(const agent_protocol::RestoredRequest& r,
                                        std::chrono::milliseconds timeout);
  // Closes the browser so that it writes its profile out; answers once it has exited.
  net::awaitable<Result<void>> close_browser(std::chrono::milliseconds timeout);
  // The browser's cookies and pages' URLs (agent_protocol::parse_browser_state), and giving them
  // to another browser.
  net::awaitable<Result<nlohmann::json>> browser_state();
  net::awaitable<Result<void>> set_browser_state(const nlohmann::json& state);
  // The X clipboard's text, and setting it (agent_protocol::kClipboardPath).
  net::awaitable<Result<std::string>> clipboard();
  net::awaitable<Result<void>> set_clipboard(const std::string& text);
  // Runs a batch of actions on a screen of `screen` pixels.
  net::awaitable<Result<ComputerAnswer>> computer(const computer::Batch& batch,
                                                  computer::ScreenSize screen);
  net::awaitable<Result<AgentImage>> screenshot(const api::ShotQuery& shot);
  // The browser's events after the agent's event `since` (agent_protocol::kEventsPath): one
  // JSON line each, handed over after the answer's header.
  net::awaitable<Result<Tunnel>> browser_events(uint64_t since);
  // The sandbox's files (agent_protocol::kFilesPath). A file's bytes come as a stream of
  // `length` bytes; an upload is a stream the caller writes `size` bytes to once the agent
  // said it takes them, then finishes with upload_answer.
  net::awaitable<Result<Tunnel>> read_file(const std::string& path);
  net::awaitable<Result<std::vector<agent_protocol::FileEntry>>> list_files(const std::string& dir);
  net::awaitable<Result<void>> remove_file(const std::string& path);
  net::awaitable<Result<Tunnel>> start_upload(const std::string& path, uint64_t size);
  static net::awaitable<Result<StoredFile>> upload_answer(Tunnel& upload);
  // Screen recordings (agent_protocol::kRecordingsPath): the recording's status.
  net::awaitable<Result<agent_protocol::RecordingStatus>> start_recording(
      const agent_protocol::RecordingRequest& r);
  net::awaitable<Result<agent_protocol::RecordingStatus>> recording_status(const std::string& id);
  // Stopping answers once the file is complete, within `timeout`.
  net::awaitable<Result<agent_protocol::RecordingStatus>> stop_recording(
      const std::string& id, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // A stream of frames (docs/agent-protocol.md), handed over after the answer's header.
  net::awaitable<Result<Tunnel>> frames(const std::string& agent_query);
  // GET path from the browser's DevTools on 127.0.0.1:port: the answer's body, at most
  // body_limit bytes.
  net::awaitable<Result<std::string>> devtools_get(int port, const std::string& path,
                                                   size_t body_limit);
  // Opens a stream to 127.0.0.1:port inside the sandbox: directly where the driver can, else
  // through the agent's CONNECT.
  net::awaitable<Result<Tunnel>> connect(int port);
  // A connection that waits at the agent's egress door (kEgressWaitPath): its next bytes are
  // kEgressPaired, then a sandbox program's connection to its proxy.
  net::awaitable<Result<drivers::AgentStream>> egress_wait();

 private:
  // One request to the agent on a new connection. The answer's body may be at most
  // `body_limit` bytes (never more than kMaxAgentBody): what that endpoint can honestly carry,
  // so a hostile agent cannot make cabind buffer more.
  net::awaitable<Result<http::response<http::string_body>>> request(
      http::verb method, const std::string& target, std::string body,
      std::chrono::milliseconds timeout, size_t body_limit);
  // GET target from the agent, for an endpoint that streams: on 200 the stream is handed over
  // right after the response header (buffer: body bytes already read). The agent's errors come
  // back as errors: 400 as kInvalidArgument, 503 as kUnavailable, with the agent's message.
  net::awaitable<Result<Tunnel>> open_stream(const std::string& target);

  drivers::Sandbox& sandbox_;
  std::string secret_;
};

}  // namespace cabin::sessions
