// SessionManager's warm pools: sandboxes started ahead of the creates that claim them.
#include <algorithm>
#include <charconv>

#include "common/log.h"
#include "common/spawn.h"
#include "server/api/errors.h"
#include "server/api/ids.h"
#include "server/metrics/metrics.h"
#include "server/sessions/session_manager.h"

namespace cabin::sessions {
namespace {

const auto& pool_log() {
  static auto l = logger("pools");
  return l;
}

// A start that failed waits this long before the next, doubling up to the cap: a driver that
// cannot start sandboxes is not hammered.
constexpr std::chrono::seconds kFirstRetry{1};
constexpr std::chrono::seconds kMaxRetry{60};

std::optional<int> read_number(std::string_view s, int min, int max) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty() || v < min || v > max)
    return std::nullopt;
  return v;
}

}  // namespace

Result<PoolConfig> parse_pool(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return make_error(Errc::kInvalidArgument, "bad_pool",
                      "\"" + std::string(text.substr(0, 64)) + "\": " + why +
                          " (expected DRIVER:WIDTHxHEIGHT:COUNT, as namespace:1280x800:2)");
  };
  const size_t c1 = text.find(':');
  const size_t c2 = c1 == std::string_view::npos ? c1 : text.find(':', c1 + 1);
  if (c2 == std::string_view::npos || text.find(':', c2 + 1) != std::string_view::npos)
    return bad("three parts separated by ':'");
  PoolConfig p;
  p.driver = std::string(text.substr(0, c1));
  if (p.driver != "namespace" && p.driver != "microvm") return bad("no such driver");
  const std::string_view shape = text.substr(c1 + 1, c2 - c1 - 1);
  const size_t x = shape.find('x');
  auto w = x == std::string_view::npos ? std::nullopt
                                       : read_number(shape.substr(0, x), api::kMinDimension,
                                                     api::kMaxDimension);
  auto h = x == std::string_view::npos ? std::nullopt
                                       : read_number(shape.substr(x + 1), api::kMinDimension,
                                                     api::kMaxDimension);
  if (!w || !h) {
    return bad("the size is WIDTHxHEIGHT, each " + std::to_string(api::kMinDimension) + ".." +
               std::to_string(api::kMaxDimension));
  }
  auto n = read_number(text.substr(c2 + 1), 1, kMaxPoolSize);
  if (!n) return bad("the count is 1.." + std::to_string(kMaxPoolSize));
  p.width = *w;
  p.height = *h;
  p.count = *n;
  return p;
}

void SessionManager::start_pools() {
  for (size_t i = 0; i < pools_.size(); ++i) {
    if (!drivers_.count(pools_[i].state.config.driver)) {
      pool_log()->warn("pool {}: no such driver here; not filled", pools_[i].state.config.name());
      continue;
    }
    cabin::spawn(ex_, fill_pool(i), "pool " + pools_[i].state.config.name());
  }
}

std::vector<PoolState> SessionManager::pools() const {
  std::vector<PoolState> out;
  for (const auto& p : pools_) {
    PoolState s = p.state;
    s.ready = static_cast<int>(p.ready.size());
    out.push_back(s);
  }
  return out;
}

net::awaitable<void> SessionManager::fill_pool(size_t index) {
  for (;;) {
    Pool& p = pools_[index];
    if (draining_) co_return;
    if (static_cast<int>(p.ready.size()) >= p.state.config.count) {
      co_await pool_changed_.wait_until(Notifier::Clock::time_point::max());
      continue;
    }
    ++p.state.starting;
    auto made = co_await start_pooled(p.state.config);
    --p.state.starting;
    pool_changed_.notify_all();
    if (made && draining_) {
      co_await drop_pooled(*made);
      co_return;
    }
    if (made) {
      p.failures = 0;
      p.ready.push_back(std::move(*made));
      continue;
    }
    if (draining_) co_return;  // ended by the shutdown, not failed
    const auto wait = std::min<std::chrono::seconds>(kMaxRetry, kFirstRetry * (1 << std::min(p.failures, 6)));
    ++p.failures;
    pool_log()->warn("pool {}: a sandbox did not start ({}); next try in {} s",
                     p.state.config.name(), made.error().message, wait.count());
    const auto until = Notifier::Clock::now() + wait;
    while (!draining_ && Notifier::Clock::now() < until) co_await pool_changed_.wait_until(until);
  }
}

net::awaitable<Result<SessionPtr>> SessionManager::start_pooled(const PoolConfig& p) {
  auto d = drivers_.find(p.driver);
  const auto info = d->second->info();
  if (!info.available) {
    co_return make_error(Errc::kUnavailable, "driver_unavailable", info.unavailable_reason);
  }
  api::SessionSpec spec;
  spec.driver = p.driver;
  spec.resolution = {p.width, p.height};
  store::SessionRecord rec = new_record(api::new_session_id(), p.driver, spec, Tenant{});
  rec.owner.clear();
  const bool egress = config_.egress.enabled && info.supports_egress;
  std::shared_ptr<egress::SessionCa> ca;
  CABIN_CO_ASSIGN_OR_RETURN(auto sb, sandbox_spec(rec, spec, egress, ca));
  CABIN_CO_ASSIGN_OR_RETURN(auto started,
                            co_await start_sandbox(p.driver, spec, sb, false, nullptr, ca));
  auto s = std::make_shared<Session>(rec, spec, std::move(started.sandbox), started.first_secret,
                                     ex_);
  s->ca_ = std::move(ca);
  s->pooled_ = true;
  watch(s);
  // Not a guard object: a frame destroyed with the io_context at exit must not touch the
  // manager, which is gone by then.
  pool_starting_.insert(s);
  if (draining_) s->ending_ = true;  // shutdown came while the driver started it
  // Chromium starts once the egress proxy accepts: it gets the default policy until a claim
  // sets the session's.
  Result<void> ready = co_await make_ready(s, started.from, sb, egress);
  pool_starting_.erase(s);
  if (!ready || !s->pooled_) {
    co_await drop_pooled(s);
    if (!ready) co_return ready.error();
    co_return make_error(Errc::kUnavailable, "sandbox_exited", "the sandbox exited while starting");
  }
  pool_log()->info("pool {}: sandbox {} ready", p.name(), rec.id);
  co_return s;
}

SessionPtr SessionManager::take_pooled(const api::SessionSpec& spec, const std::string& driver) {
  const bool default_resources =
      spec.resources.vcpus == 0 &&
      (spec.resources.memory_mb == 0 || (spec.resources.memory_mb << 20) == config_.memory_bytes);
  for (auto& p : pools_) {
    const auto& c = p.state.config;
    if (c.driver != driver || c.width != spec.resolution.width ||
        c.height != spec.resolution.height || !default_resources) {
      continue;
    }
    if (p.ready.empty()) {
      ++p.state.misses;
      metrics::registry().inc("cabin_pool_claims_total", {c.name(), "empty"});
      return nullptr;
    }
    SessionPtr s = std::move(p.ready.front());
    p.ready.pop_front();
    ++p.state.claims;
    metrics::registry().inc("cabin_pool_claims_total", {c.name(), "claimed"});
    // Its filler starts the next once this claim is through (ready_claimed), not beside it: a
    // start competes for the CPU the claimed session needs for its start page.
    return s;
  }
  return nullptr;
}

Result<void> SessionManager::claim(const SessionPtr& s, const api::SessionSpec& spec,
                                   const Tenant& tenant) {
  s->pooled_ = false;
  s->record_ = new_record(s->id(), s->record_.driver, spec, tenant);
  s->spec_ = spec;
  if (auto r = store_.insert(s->record_); !r) {
    pool_changed_.notify_all();  // its pool starts the next
    cabin::spawn(ex_, drop_pooled(s), "pooled sandbox " + s->id() + ": destroy");
    return r.error();
  }
  live_[s->id()] = s;
  return {};
}

net::awaitable<Result<SessionPtr>> SessionManager::ready_claimed(SessionPtr s) {
  if (s->egress_) {
    s->egress_->set_policy(std::make_shared<const egress::Policy>(
        s->spec().network ? *s->spec().network : config_.egress.default_policy));
  }
  Result<void> ready = co_await open_start_page(*s);
  if (ready && s->ending_) {
    ready = make_error(Errc::kUnavailable, "sandbox_exited", s->record().end_reason);
  }
  pool_changed_.notify_all();  // the claim is through: its pool starts the next
  if (!ready) {
    pool_log()->warn("session {}: claimed sandbox did not become ready: {}", s->id(),
                     ready.error().message);
    co_await finish(s, store::SessionStatus::kFailed, ready.error().message);
    co_return make_error(Errc::kUnavailable, "sandbox_unavailable",
                         "sandbox did not become ready: " + ready.error().message);
  }
  s->record_.status = store::SessionStatus::kRunning;
  (void)store_.set_status(s->id(), store::SessionStatus::kRunning, "", 0);
  start_running(s);
  pool_log()->info("session {}: running on {} ({}x{}), from its warm pool", s->id(),
                   s->record().driver, s->record().width, s->record().height);
  co_return s;
}

net::awaitable<void> SessionManager::drop_pooled(SessionPtr s) {
  for (auto& p : pools_) {
    auto it = std::find(p.ready.begin(), p.ready.end(), s);
    if (it == p.ready.end()) continue;
    p.ready.erase(it);
    pool_changed_.notify_all();
  }
  // Its watcher leaves it alone from now on (it was never a session to end), and a start still
  // waiting for it gives up.
  s->pooled_ = false;
  s->ending_ = true;
  if (s->egress_) s->egress_->stop();
  co_await s->sandbox_->destroy();
}

net::awaitable<void> SessionManager::destroy_pools(std::chrono::steady_clock::time_point deadline) {
  pool_changed_.notify_all();  // fillers see the drain
  std::vector<SessionPtr> all(pool_starting_.begin(), pool_starting_.end());
  for (auto& p : pools_) {
    for (auto& s : p.ready) all.push_back(std::move(s));
    p.ready.clear();
  }
  for (auto& s : all) co_await drop_pooled(s);
  // The starts under way see their sandbox end (ending_) and return.
  const auto starting = [this] {
    int n = 0;
    for (const auto& p : pools_) n += p.state.starting;
    return n;
  };
  while (starting() > 0 && std::chrono::steady_clock::now() < deadline)
    co_await pool_changed_.wait_until(deadline);
}

}  // namespace cabin::sessions
