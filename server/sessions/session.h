// Session: one live session, and the verbs a request may do with it. Each verb is typed on both
// sides: the caller passes a parsed request and gets a checked answer; the agent's paths, budgets
// and wire format stay in AgentClient.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/agent_protocol.h"
#include "common/computer_actions.h"
#include "server/api/computer_wire.h"
#include "server/api/session_spec.h"
#include "server/drivers/sandbox_driver.h"
#include "server/egress/network_log.h"
#include "server/egress/proxy.h"
#include "server/sessions/agent_client.h"
#include "server/sessions/event_log.h"
#include "server/store/session_store.h"

namespace cabin::sessions {

class SessionManager;

// A stream to the browser's DevTools, and the WebSocket path and port to hand-shake for.
struct CdpUpstream {
  Tunnel tunnel;
  std::string path;  // "/devtools/browser/<uuid>" or "/devtools/page/<target>"
  int port = 0;
};

class Session final {
 public:
  Session(store::SessionRecord record, api::SessionSpec spec, drivers::SandboxPtr sandbox,
          std::string agent_secret, const net::any_io_executor& ex)
      : record_(std::move(record)),
        spec_(std::move(spec)),
        sandbox_(std::move(sandbox)),
        agent_(*sandbox_, std::move(agent_secret)),
        expiry_(ex),
        idle_timer_(ex),
        control_timer_(ex),
        events_(std::make_shared<EventLog>(ex)) {}

  // Someone uses the session: a client stream (CDP, VNC or live view, frames, a preview) or an
  // API request in flight. The session is idle only while none is held; its idle time starts
  // when the last one goes. Holds the session weakly: it never keeps an ended one alive.
  class Presence {
   public:
    Presence() = default;
    explicit Presence(const std::shared_ptr<Session>& s);
    Presence(Presence&& o) noexcept = default;
    Presence& operator=(Presence&& o) noexcept;
    Presence(const Presence&) = delete;
    Presence& operator=(const Presence&) = delete;
    ~Presence() { reset(); }
    void reset();

   private:
    std::weak_ptr<Session> s_;
  };
  // Since when no one has used the running session (unix seconds); nullopt while someone does,
  // or while it is not running.
  std::optional<int64_t> idle_since() const;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& id() const { return record_.id; }
  const store::SessionRecord& record() const { return record_; }
  const api::SessionSpec& spec() const { return spec_; }
  // Ready and not ending: streams may be opened to it.
  bool running() const { return record_.status == store::SessionStatus::kRunning && !ending_; }
  // Frozen by POST /pause (or on_idle): its streams stay open, nothing in it runs.
  bool paused() const { return record_.status == store::SessionStatus::kPaused && !ending_; }
  // Paused with its sandbox saved to disk, nothing of it running (PauseMode::kHibernate).
  bool hibernated() const { return sandbox_->hibernated(); }
  // Bumped to revoke every token of the session at once.
  uint32_t token_generation() const { return record_.token_generation; }
  // The sandbox's screen, and the size a model sees it at (the spec's display), if another.
  computer::ScreenSize screen() const { return {record_.width, record_.height}; }
  // The browser's DevTools port in the sandbox (0 until the agent has said).
  int devtools_port() const { return devtools_port_; }
  std::optional<computer::Size> model_size() const;

  net::awaitable<Result<agent_protocol::ExecResult>> exec(const agent_protocol::ExecRequest& r);
  net::awaitable<Result<ComputerAnswer>> computer(const computer::Batch& batch);
  net::awaitable<Result<AgentImage>> screenshot(const api::ShotQuery& shot);
  // Takes the browser's first page to `url`, as far as `wait_until` ("commit", "load",
  // "networkidle"), within `timeout`; navigation_failed says why not.
  net::awaitable<Result<void>> navigate(const std::string& url, const std::string& wait_until,
                                        std::chrono::milliseconds timeout);
  // The browser's own /json/version or /json/list, as it answered.
  net::awaitable<Result<std::string>> devtools_discovery(bool version);
  // The browser's endpoint, or a page's when `page_target` is given.
  net::awaitable<Result<CdpUpstream>> open_cdp(const std::optional<std::string>& page_target);
  // The RFB (VNC) server's stream.
  net::awaitable<Result<Tunnel>> open_rfb();
  // A stream of frames; `agent_query` as api::frames_agent_query made it.
  net::awaitable<Result<Tunnel>> open_frames(const std::string& agent_query);
  // A stream to a TCP port on the sandbox's loopback (previews).
  net::awaitable<Result<Tunnel>> open_port(int port);
  // A connection waiting at the agent's egress door, for the proxy (a microVM's way out).
  net::awaitable<Result<drivers::AgentStream>> egress_wait();

  // The sandbox's clipboard text (UTF-8), read and set through the agent.
  net::awaitable<Result<std::string>> clipboard();
  net::awaitable<Result<void>> set_clipboard(const std::string& text);

  // What happened in the session (GET /events); streams hold it past the session's end.
  const EventLogPtr& events() const { return events_; }
  // The downloads the browser finished, oldest first (at most kMaxDownloads): each
  // download_finished event's fields.
  static constexpr size_t kMaxDownloads = 1000;
  const std::deque<nlohmann::json>& downloads() const { return downloads_; }
  // The agent, for the sandbox's files.
  AgentClient& agent() { return agent_; }

  // The input lock. While someone holds it, /computer's input actions are refused
  // (human_in_control): an agent must not fight the person at the wheel.
  struct Control {
    std::string holder;      // "live_view", or the API caller ("admin", a tenant key's id)
    bool viewer = false;     // taken by a live view: let go when the last control viewer leaves
    int64_t since = 0;       // unix seconds
    int64_t expires_at = 0;  // unix seconds: let go then unless taken again
  };
  const std::optional<Control>& control() const { return control_; }
  // Takes it, or takes it again (the newest taker holds it), for `ttl_s`.
  void take_control(std::string holder, bool viewer, int64_t ttl_s);
  // Lets it go; `why` ("released", "expired", "viewer_left", "session_ended") goes into the
  // control_released event. False when no one held it.
  bool release_control(std::string_view why);
  // Held by each live-view connection that may send input, while it is open.
  class ControlViewer {
   public:
    ControlViewer() = default;
    explicit ControlViewer(const std::shared_ptr<Session>& s);
    ControlViewer(ControlViewer&& o) noexcept = default;
    ControlViewer& operator=(ControlViewer&&) = delete;
    ~ControlViewer();

   private:
    std::weak_ptr<Session> s_;
  };

  // The egress policy in force (null: the session has no egress proxy, so no way out).
  std::shared_ptr<const egress::Policy> network() const {
    return egress_ ? egress_->policy() : nullptr;
  }
  // Replaces it; tunnels it no longer allows close. kUnavailable without an egress proxy.
  Result<void> set_network(egress::Policy p);
  const egress::NetworkLog* network_log() const { return network_log_.get(); }

 private:
  friend class SessionManager;  // drives the lifecycle: ready, ending, revocation

  store::SessionRecord record_;
  api::SessionSpec spec_;  // a pooled sandbox's is set when it is claimed
  drivers::SandboxPtr sandbox_;
  AgentClient agent_;
  // Starts the idle time again, now, with the timer at idle_timeout_s (none for 0), if the
  // session runs and no one is present; else does nothing. On the manager's executor.
  void idle_again();

  int64_t now() const;

  net::steady_timer expiry_;
  net::steady_timer idle_timer_;
  net::steady_timer control_timer_;
  std::optional<Control> control_;
  int control_viewers_ = 0;
  EventLogPtr events_;
  std::deque<nlohmann::json> downloads_;
  std::map<std::string, nlohmann::json> recordings_;  // live ones, by id: their records
  bool following_browser_ = false;  // a coroutine carries the agent's browser events over
  int present_ = 0;                // Presences held
  int64_t idle_since_ = 0;         // unix seconds; meaningful while running with no one present
  bool pausing_ = false;           // a pause or resume is under way
  std::function<void()> on_idle_;  // the idle timer ran out with no one present
  std::function<void()> on_network_change_;  // the manager keeps the handoff up to date
  std::function<int64_t()> now_;   // the manager's clock
  // Filled in when the agent reports ready.
  int devtools_port_ = 0;
  std::string browser_path_;
  bool ending_ = false;
  bool released_ = false;  // left running for the next cabind: this one no longer watches it
  bool pooled_ = false;    // a warm pool's, no session yet: not in the store, not live
  bool own_profile_ = false;  // a fork's copy of its source's profile: removed when it ends
  std::shared_ptr<egress::NetworkLog> network_log_;
  std::shared_ptr<egress::EgressProxy> egress_;
  std::shared_ptr<egress::SessionCa> ca_;  // signs what the sandbox sees of hosts with secrets
};

using SessionPtr = std::shared_ptr<Session>;

}  // namespace cabin::sessions
