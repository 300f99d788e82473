// BrowserEvents: watches the browser over CDP from the agent and keeps what happened as event
// lines for cabind (agent_protocol::kEventsPath): pages opened, closed and navigated, dialogs,
// file choosers, and downloads, which it saves under its downloads directory by their names.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/notifier.h"
#include "common/result.h"
#include "vm-images/agent/agent_state.h"
#include "vm-images/agent/cdp.h"

namespace cabin::agent {

class BrowserEvents {
 public:
  BrowserEvents(net::any_io_executor ex, AgentState& state, std::string downloads_dir);
  BrowserEvents(const BrowserEvents&) = delete;
  BrowserEvents& operator=(const BrowserEvents&) = delete;

  // Watches the browser once it is ready, again after its connection ends, until stop().
  net::awaitable<void> run();
  void stop();

  // The lines after event `since`, oldest first.
  std::vector<std::pair<uint64_t, std::string>> after(uint64_t since) const;
  Notifier& changed() { return changed_; }
  bool stopped() const { return stopped_; }

  // The file input of the last chooser a page opened, while that page lives.
  struct Chooser {
    std::string page;  // target id
    int64_t backend_node = 0;
  };
  std::optional<Chooser> last_chooser() const;
  const std::string& downloads_dir() const { return downloads_dir_; }

  // Gives `paths` to a file input of the page in front: the one `selector` names, else the one
  // whose chooser a page opened last, else the focused element. no_file_input when there is
  // none of these.
  net::awaitable<Result<void>> fill_file_input(std::vector<std::string> paths,
                                               std::string selector);

  // Adds an event (fields: strings and counts, cut to agent_protocol::kMaxEventString).
  void emit(const std::string& type, nlohmann::json fields);

 private:
  net::awaitable<void> watch(DevToolsEndpoint devtools);
  // Handles one CDP message; calls to send on the browser connection go to `out`.
  void on_message(const nlohmann::json& m, std::vector<nlohmann::json>& out);
  net::awaitable<void> finish_download(std::string guid, std::string from);

  net::any_io_executor ex_;
  AgentState& state_;
  std::string downloads_dir_;
  Notifier changed_;
  bool stopped_ = false;
  CdpSocket* live_ = nullptr;
  uint64_t seq_ = 0;
  std::deque<std::pair<uint64_t, std::string>> lines_;
  int next_call_ = 1;
  std::map<std::string, std::string> pages_;     // target id -> URL
  std::map<std::string, std::string> sessions_;  // CDP session -> target id
  struct Download {
    std::string url;
    std::string name;
  };
  std::map<std::string, Download> downloads_;  // by guid
  std::optional<Chooser> chooser_;
};

// A download's name as the page suggested it, made a safe file name: no "/", no control
// characters, no leading dot, at most 200 bytes of whole UTF-8 characters; "download" if
// nothing is left.
std::string safe_file_name(std::string_view suggested);

// Streams the lines after `since` on `socket` (200, application/x-ndjson), then each new one,
// until the peer goes away or the events stop.
net::awaitable<void> serve_events(net::generic::stream_protocol::socket socket,
                                  BrowserEvents& events, uint64_t since);

}  // namespace cabin::agent
