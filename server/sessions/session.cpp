#include "server/sessions/session.h"

#include <ctime>
#include <optional>

#include "cdp-bridge/discovery.h"
#include "server/api/errors.h"
#include "server/egress/proxy_request.h"

namespace cabin::sessions {

Session::Presence::Presence(const std::shared_ptr<Session>& s) : s_(s) {
  if (s->present_++ == 0) s->idle_timer_.cancel();
}

Session::Presence& Session::Presence::operator=(Presence&& o) noexcept {
  if (this != &o) {
    reset();
    s_ = std::move(o.s_);
  }
  return *this;
}

void Session::Presence::reset() {
  auto s = s_.lock();
  s_.reset();
  if (s && --s->present_ == 0) s->idle_again();
}

std::optional<int64_t> Session::idle_since() const {
  if (!running() || present_ > 0) return std::nullopt;
  return idle_since_;
}

void Session::idle_again() {
  if (!running() || present_ > 0 || !now_) return;
  idle_since_ = now_();
  idle_timer_.cancel();
  if (record_.idle_timeout_s <= 0) return;
  idle_timer_.expires_after(std::chrono::seconds(record_.idle_timeout_s));
  // The timer is the session's: it is cancelled before the session goes.
  idle_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && present_ == 0 && !ending_ && on_idle_) on_idle_();
  });
}

int64_t Session::now() const {
  return now_ ? now_() : static_cast<int64_t>(std::time(nullptr));
}

void Session::take_control(std::string holder, bool viewer, int64_t ttl_s) {
  const int64_t now = this->now();
  const bool changed = !control_ || control_->holder != holder;
  control_ = Control{std::move(holder), viewer, changed ? now : control_->since, now + ttl_s};
  if (changed) {
    events_->emit("control_taken",
                  {{"holder", control_->holder}, {"expires_at", control_->expires_at}});
  }
  control_timer_.expires_after(std::chrono::seconds(ttl_s));
  // The timer is the session's: it is cancelled before the session goes.
  control_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) release_control("expired");
  });
}

bool Session::release_control(std::string_view why) {
  if (!control_) return false;
  control_timer_.cancel();
  const std::string holder = std::move(control_->holder);
  control_.reset();
  events_->emit("control_released", {{"holder", holder}, {"reason", why}});
  return true;
}

Session::ControlViewer::ControlViewer(const std::shared_ptr<Session>& s) : s_(s) {
  ++s->control_viewers_;
}

Session::ControlViewer::~ControlViewer() {
  auto s = s_.lock();
  if (!s) return;
  if (--s->control_viewers_ == 0 && s->control_ && s->control_->viewer) {
    s->release_control("viewer_left");
  }
}

net::awaitable<Result<std::string>> Session::clipboard() { co_return co_await agent_.clipboard(); }

net::awaitable<Result<void>> Session::set_clipboard(const std::string& text) {
  co_return co_await agent_.set_clipboard(text);
}

std::optional<computer::Size> Session::model_size() const {
  if (const auto& d = spec_.display) return computer::Size{d->width, d->height};
  return std::nullopt;
}

net::awaitable<Result<agent_protocol::ExecResult>> Session::exec(
    const agent_protocol::ExecRequest& r) {
  co_return co_await agent_.exec(r);
}

net::awaitable<Result<ComputerAnswer>> Session::computer(const computer::Batch& batch) {
  co_return co_await agent_.computer(batch, screen());
}

net::awaitable<Result<AgentImage>> Session::screenshot(const api::ShotQuery& shot) {
  co_return co_await agent_.screenshot(shot);
}

namespace {

// A URL's host as the egress log writes it (canonical, as the proxy reads an authority); empty
// when the URL has none.
std::string logged_host(std::string_view url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return {};
  std::string_view authority = url.substr(scheme_end + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (auto at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  // Only the host is compared: any default port will do.
  auto a = egress::parse_authority(authority, 1);
  return a ? a->host.to_string() : std::string();
}

}  // namespace

net::awaitable<Result<void>> Session::navigate(const std::string& url,
                                              const std::string& wait_until,
                                              std::chrono::milliseconds timeout) {
  const uint64_t before = network_log_ ? network_log_->last_seq() : 0;
  auto r = co_await agent_.navigate(url, wait_until, timeout);
  if (r || r.error().code != "navigation_failed" || !network_log_) co_return r;
  // Chromium says only that the tunnel failed; the egress log says why. The URL's own host
  // first, else the first refusal during the navigation.
  const std::string host = logged_host(url);
  std::optional<egress::EgressRecord> refused;
  for (auto& rec : network_log_->since(before)) {
    if (rec.allowed) continue;
    if (rec.host == host) {
      refused = std::move(rec);
      break;
    }
    if (!refused) refused = std::move(rec);
  }
  if (!refused) co_return r;
  Error e = r.error();
  e.message += "; egress refused " + refused->host + ":" + std::to_string(refused->port) + ": " +
               refused->reason;
  co_return e;
}

net::awaitable<Result<std::string>> Session::devtools_discovery(bool version) {
  // Named, not a temporary: GCC 12 destroys some temporaries of a co_await expression twice.
  const std::string path = version ? "/json/version" : "/json/list";
  co_return co_await agent_.devtools_get(devtools_port_, path, cdp::kMaxDiscoveryBody);
}

net::awaitable<Result<CdpUpstream>> Session::open_cdp(
    const std::optional<std::string>& page_target) {
  const int port = devtools_port_;
  std::string path = page_target ? "/devtools/page/" + *page_target : browser_path_;
  CABIN_CO_ASSIGN_OR_RETURN(auto tunnel, co_await agent_.connect(port));
  co_return CdpUpstream{std::move(tunnel), std::move(path), port};
}

net::awaitable<Result<Tunnel>> Session::open_rfb() {
  co_return co_await agent_.connect(agent_protocol::kRfbPort);
}

net::awaitable<Result<Tunnel>> Session::open_frames(const std::string& agent_query) {
  co_return co_await agent_.frames(agent_query);
}

net::awaitable<Result<Tunnel>> Session::open_port(int port) {
  co_return co_await agent_.connect(port);
}

net::awaitable<Result<drivers::AgentStream>> Session::egress_wait() {
  if (ending_) co_return make_error(Errc::kUnavailable, "sandbox_ended", "the session ended");
  co_return co_await agent_.egress_wait();
}

Result<void> Session::set_network(egress::Policy p) {
  if (!egress_) {
    return api::errors::no_egress();
  }
  egress_->set_policy(std::make_shared<const egress::Policy>(std::move(p)));
  if (on_network_change_) on_network_change_();
  return {};
}

}  // namespace cabin::sessions
