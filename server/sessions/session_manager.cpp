#include "server/sessions/session_manager.h"

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fstream>

#include "common/crypto.h"
#include "common/json_fields.h"
#include "common/log.h"
#include "common/spawn.h"
#include "server/api/errors.h"
#include "server/api/ids.h"
#include "server/metrics/metrics.h"

namespace cabin::sessions {
namespace {

// The agent gives Chromium 10 s to write its profile out and exit.
constexpr std::chrono::milliseconds kProfileCloseTimeout{15000};

const auto& log() {
  static auto l = logger("sessions");
  return l;
}

net::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  net::steady_timer t(co_await net::this_coro::executor, d);
  boost::system::error_code ec;
  co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
}

}  // namespace

SessionManager::SessionManager(net::any_io_executor ex, ManagerConfig config,
                               std::map<std::string, std::unique_ptr<drivers::SandboxDriver>> drivers,
                               store::SessionStore& store, const Clock& clock)
    : ex_(std::move(ex)),
      config_(std::move(config)),
      drivers_(std::move(drivers)),
      store_(store),
      clock_(clock) {
  metrics::registry().inc("cabin_create_queue_waiting", {}, 0);  // shown from the start
  for (const auto& p : config_.pools) pools_.push_back(Pool{PoolState{p}, {}, 0});
}

std::vector<drivers::DriverInfo> SessionManager::driver_infos() const {
  std::vector<drivers::DriverInfo> out;
  for (const auto& [_, d] : drivers_) out.push_back(d->info());
  return out;
}

std::map<std::pair<std::string, std::string>, int> SessionManager::counts() const {
  std::map<std::pair<std::string, std::string>, int> out;
  for (const auto& [_, s] : live_) {
    ++out[{std::string(store::to_string(s->record().status)), s->record().driver}];
  }
  return out;
}

SessionPtr SessionManager::find(const std::string& id) const {
  auto it = live_.find(id);
  return it == live_.end() || it->second->ending_ ? nullptr : it->second;
}

std::optional<store::SessionRecord> SessionManager::record(const std::string& id) const {
  if (auto it = live_.find(id); it != live_.end()) return it->second->record();
  return store_.get(id);
}

namespace {
// Ended sessions listed besides the live ones, at most: their records stay for a while.
constexpr size_t kListedEnded = 1000;
}  // namespace

std::vector<store::SessionRecord> SessionManager::list(bool include_ended) const {
  // Every live session (a node may hold ten thousand), and with include_ended the newest ended.
  auto rows = store_.list(include_ended, static_cast<int>(live_.size() + kListedEnded));
  // Live sessions carry their in-memory status ("starting" vs "running").
  for (auto& r : rows) {
    if (auto it = live_.find(r.id); it != live_.end()) r = it->second->record();
  }
  return rows;
}

std::vector<store::SessionRecord> SessionManager::list_of(const std::string& owner,
                                                         bool include_ended) const {
  auto rows = store_.list_of(owner, include_ended, static_cast<int>(live_.size() + kListedEnded));
  for (auto& r : rows) {
    if (auto it = live_.find(r.id); it != live_.end()) r = it->second->record();
  }
  return rows;
}

Result<void> check_tenant_budget(const Footprint& held, const Footprint& add, const Budget& b,
                                 int64_t retry_after_s) {
  if (b.max_sessions > 0 && held.sessions + add.sessions > b.max_sessions)
    return api::errors::quota_sessions(b.max_sessions, retry_after_s);
  if (b.max_memory_bytes > 0 && held.memory_bytes + add.memory_bytes > b.max_memory_bytes) {
    return api::errors::quota_memory(b.max_memory_bytes >> 20, held.memory_bytes >> 20,
                                     add.memory_bytes >> 20, retry_after_s);
  }
  if (b.max_vcpus > 0 && held.vcpus + add.vcpus > b.max_vcpus)
    return api::errors::quota_vcpus(b.max_vcpus, held.vcpus, add.vcpus, retry_after_s);
  return {};
}

Result<void> check_node_memory(uint64_t held, uint64_t add, uint64_t limit, int64_t retry_after_s) {
  if (limit == 0 || held + add <= limit) return {};
  return api::errors::capacity_memory(limit >> 20, held >> 20, add >> 20, retry_after_s);
}

Footprint SessionManager::footprint(const api::SessionSpec& spec, const std::string& driver) const {
  const DriverLimits l = limits_for(driver);
  if (!l.holds_host) return {1, 0, 0};
  return {1, memory_bytes(spec), spec.resources.vcpus > 0 ? spec.resources.vcpus : l.default_vcpus};
}

Footprint SessionManager::tenant_footprint(const std::string& owner) const {
  auto p = pending_.find(owner);
  Footprint f = p == pending_.end() ? Footprint{} : p->second;
  for (const auto& [_, s] : live_) {
    if (s->record().owner == owner) f += footprint(s->spec(), s->record().driver);
  }
  return f;
}

uint64_t SessionManager::node_memory() const {
  uint64_t bytes = 0;
  for (const auto& [_, p] : pending_) bytes += p.memory_bytes;
  for (const auto& [_, s] : live_) bytes += footprint(s->spec(), s->record().driver).memory_bytes;
  for (const auto& s : pool_starting_)
    bytes += footprint(s->spec(), s->record().driver).memory_bytes;
  for (const auto& pool : pools_) {
    for (const auto& s : pool.ready) bytes += footprint(s->spec(), s->record().driver).memory_bytes;
  }
  return bytes;
}

Pruned SessionManager::prune_state_now() {
  auto holds = [this](const std::string& id) {
    if (live_.count(id)) return true;
    for (const auto& s : pool_starting_)
      if (s->id() == id) return true;
    for (const auto& pool : pools_) {
      for (const auto& s : pool.ready)
        if (s->id() == id) return true;
    }
    return false;
  };
  const Pruned p = prune_state(config_.logs_dir, config_.recordings_dir, holds,
                               clock_.unix_seconds(), config_.retention);
  if (p.sessions > 0) {
    log()->info("pruned what {} ended sessions left (logs, recordings): {} bytes", p.sessions,
                p.bytes);
  }
  return p;
}

// What an admitted create holds until its session is live or the create fails: its place in its
// tenant's budgets, and once it has room, a start on its driver. Both go back together.
struct SessionManager::Admission {
  Admission(SessionManager& m, std::string owner, Footprint f)
      : m(m), owner(std::move(owner)), held(f) {
    m.pending_[this->owner] += held;
  }
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  ~Admission() { release(); }
  // The session is in live_ now (or the create failed): it counts there from here on.
  void release() {
    if (pending) {
      pending = false;
      auto& p = m.pending_[owner];
      p -= held;
      if (p.sessions <= 0) m.pending_.erase(owner);
    }
    if (!driver.empty()) {
      --m.starting_[driver];
      driver.clear();
      m.room_.notify_all();
    }
  }
  SessionManager& m;
  std::string owner;
  Footprint held;
  bool pending = true;
  std::string driver;  // set while it holds a start on this driver
};

SessionManager::Load SessionManager::load() const {
  Load l;
  l.total = static_cast<int>(live_.size());
  for (const auto& [name, n] : starting_) {
    l.total += n;
    l.per_driver[name] += n;
  }
  for (const auto& [_, s] : live_) ++l.per_driver[s->record().driver];
  return l;
}

bool SessionManager::has_room(const Load& l, const std::string& driver) const {
  if (l.total >= config_.max_sessions) return false;
  auto it = l.per_driver.find(driver);
  return (it == l.per_driver.end() ? 0 : it->second) < limits_for(driver).max_sessions;
}

int64_t SessionManager::soonest_end_s(const std::string* owner) const {
  const int64_t now = clock_.unix_seconds();
  int64_t soonest = 3600;
  for (const auto& [_, s] : live_) {
    const auto& r = s->record();
    if (owner && r.owner != *owner) continue;
    int64_t end = r.expires_at;
    if (auto idle = s->idle_since(); idle && r.idle_timeout_s > 0)
      end = std::min(end, *idle + r.idle_timeout_s);
    soonest = std::min(soonest, end - now);
  }
  return std::max<int64_t>(soonest, 1);
}

Error SessionManager::no_room(const std::string& driver, const std::string& why) const {
  const int limit = limits_for(driver).max_sessions;
  std::string what = limit < config_.max_sessions
                         ? "driver " + driver + " runs its maximum of " + std::to_string(limit)
                         : "the server runs its maximum of " + std::to_string(config_.max_sessions);
  return api::errors::capacity(what + " sessions" + why, soonest_end_s(nullptr));
}

net::awaitable<Result<void>> SessionManager::wait_for_room(const std::string& driver,
                                                           Admission& a, Cancellation* cancel) {
  auto& m = metrics::registry();
  // The first waiter with room goes; later ones, and new arrivals, wait behind it.
  auto first_with_room = [this]() -> Waiter* {
    const Load l = load();
    for (const auto& w : queue_) {
      if (has_room(l, w->driver)) return w.get();
    }
    return nullptr;
  };
  auto take = [&] {
    ++starting_[driver];
    a.driver = driver;
  };
  if (has_room(load(), driver) && !first_with_room()) {
    take();
    co_return Result<void>{};
  }
  if (config_.create_queue <= 0) {
    m.inc("cabin_create_refusals_total", {"capacity"});
    co_return no_room(driver, "");
  }
  if (static_cast<int>(queue_.size()) >= config_.create_queue) {
    m.inc("cabin_create_refusals_total", {"queue_full"});
    co_return no_room(driver, ", and " + std::to_string(queue_.size()) +
                                  " creates wait for room already (--create-queue)");
  }
  auto w = std::make_shared<Waiter>(Waiter{driver});
  auto at = queue_.insert(queue_.end(), w);
  const metrics::GaugeHold waiting("cabin_create_queue_waiting", {});
  if (cancel) {
    cancel->on_cancel([this, w] {
      w->cancelled = true;
      room_.notify_all();
    });
  }
  const auto began = std::chrono::steady_clock::now();
  const auto deadline = began + config_.create_queue_timeout;
  Result<void> out;
  const char* outcome = "admitted";
  for (;;) {
    if (draining_) {
      out = api::errors::draining();
      outcome = "draining";
      break;
    }
    if (w->cancelled) {
      out = api::errors::capacity("the client left while its create waited for room", 0);
      outcome = "client_gone";
      break;
    }
    if (first_with_room() == w.get()) {
      take();
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      out = no_room(driver, "; none ended within " +
                                std::to_string(config_.create_queue_timeout.count() / 1000) +
                                " s (--create-queue-timeout-s)");
      outcome = "queue_timeout";
      break;
    }
    co_await room_.wait_until(deadline);
  }
  if (cancel) cancel->on_cancel(nullptr);
  queue_.erase(at);
  // The next in line looks again: it may be first with room now.
  room_.notify_all();
  m.observe("cabin_create_queue_wait_seconds", {outcome},
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  if (!out) m.inc("cabin_create_refusals_total", {outcome});
  co_return out;
}

net::awaitable<Result<SessionPtr>> SessionManager::create(const api::SessionSpec& spec,
                                                          const Tenant& tenant,
                                                          Cancellation* cancel) {
  const auto began = std::chrono::steady_clock::now();
  std::string driver_name = spec.driver.empty() ? config_.default_driver : spec.driver;
  Result<SessionPtr> r = SessionPtr();
  if (spec.network && config_.egress.enabled) {
    if (auto ok = egress::check_reachable(*spec.network, config_.egress.boundary); !ok)
      r = ok.error();
  }
  if (r) r = co_await create_on(spec, driver_name, tenant, cancel, nullptr);
  if (r && spec.record) {
    // Here rather than in create_on: a claimed pool sandbox records too, and the first frame is
    // the start page the caller asked for.
    SessionPtr s = *r;
    if (auto rec = co_await start_recording(s->id(), *spec.record, tenant); !rec) {
      const std::string why = "its recording could not start: " + rec.error().message;
      co_await finish(s, store::SessionStatus::kFailed, why);
      r = make_error(Errc::kUnavailable, "sandbox_unavailable", why);
    }
  }
  // Refused: nothing was started (a bad spec, a cap, a driver that cannot run here).
  const char* outcome = r                                         ? "ready"
                        : r.error().code == "sandbox_unavailable" ? "failed"
                                                                  : "refused";
  auto& m = metrics::registry();
  const std::string driver = drivers_.count(driver_name) ? driver_name : "unknown";
  m.inc("cabin_session_creates_total", {driver, outcome});
  if (r) {
    m.observe("cabin_session_create_seconds", {driver},
              std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  }
  co_return r;
}

net::awaitable<Result<SessionManager::Created>> SessionManager::create_once(
    const api::SessionSpec& spec, const Tenant& tenant, const std::string& key,
    const std::string& body_hash, Cancellation* cancel) {
  auto claimed = store_.claim_idempotency_key(tenant.id, key, body_hash, clock_.unix_seconds(),
                                              kIdempotencyKeep_s);
  if (!claimed) co_return claimed.error();
  if (const auto& earlier = *claimed) {
    if (earlier->body_hash != body_hash) {
      co_return make_error(Errc::kUnprocessable, "idempotency_key_reused",
                           "this Idempotency-Key came with another body; use a new key");
    }
    if (earlier->session_id.empty()) {
      co_return make_error(Errc::kConflict, "idempotency_in_progress",
                           "a create with this Idempotency-Key is still running");
    }
    if (auto r = record(earlier->session_id)) co_return Created{*r, true};
    co_return make_error(Errc::kInternal, "store", "the session of this Idempotency-Key is gone");
  }
  auto made = co_await create(spec, tenant, cancel);
  if (!made) {
    (void)store_.release_idempotency_key(tenant.id, key);
    co_return made.error();
  }
  (void)store_.settle_idempotency_key(tenant.id, key, (*made)->id());
  co_return Created{(*made)->record(), false};
}

net::awaitable<Result<SessionPtr>> SessionManager::create_on(const api::SessionSpec& spec,
                                                             const std::string& driver_name,
                                                             const Tenant& tenant,
                                                             Cancellation* cancel,
                                                             const ForkSeed* seed) {
  if (draining_) {
    metrics::registry().inc("cabin_create_refusals_total", {"draining"});
    co_return api::errors::draining();
  }
  auto d = drivers_.find(driver_name);
  if (d == drivers_.end()) {
    co_return make_error(Errc::kInvalidArgument, "unknown_driver",
                         "driver \"" + driver_name.substr(0, 32) + "\" does not exist");
  }
  auto info = d->second->info();
  if (!info.available) {
    co_return make_error(Errc::kUnavailable, "driver_unavailable",
                         "driver " + driver_name + " cannot run here: " + info.unavailable_reason);
  }
  if (spec.on_idle == api::OnIdle::kPause && !info.supports_pause) {
    co_return invalid_field("on_idle", "driver " + driver_name + " cannot pause sessions");
  }
  // A profile the tenant cannot use is refused before the create waits for room.
  if (spec.profile) {
    if (!info.supports_profiles) {
      co_return invalid_field("profile",
                              "driver " + driver_name + " cannot start from a saved profile");
    }
    if (!profiles_) co_return api::errors::profile_not_found();
    if (auto p = profiles_->get(spec.profile->id, tenant.id); !p) co_return p.error();
  }
  auto& m = metrics::registry();
  if (auto disk = check_state_disk(config_.state_dir, config_.state_min_free_bytes); !disk) {
    m.inc("cabin_create_refusals_total", {"state_disk_full"});
    co_return disk.error();
  }
  // The tenant's own limits come before the queue: a tenant over them never waits.
  const Footprint asked = footprint(spec, driver_name);
  if (auto within =
          check_tenant_budget(tenant_footprint(tenant.id), asked,
                              {tenant.max_sessions, tenant.max_memory_bytes, tenant.max_vcpus},
                              soonest_end_s(&tenant.id));
      !within) {
    m.inc("cabin_create_refusals_total", {within.error().code});
    co_return within.error();
  }
  // Nor may the node's memory be promised twice over.
  if (auto fits = check_node_memory(node_memory(), asked.memory_bytes, config_.node_memory_bytes,
                                    soonest_end_s(nullptr));
      !fits) {
    m.inc("cabin_create_refusals_total", {"capacity_memory"});
    co_return fits.error();
  }
  if (tenant.max_creates_per_minute > 0) {
    if (int64_t wait = rates_.take(tenant.id, tenant.max_creates_per_minute); wait > 0) {
      m.inc("cabin_create_refusals_total", {"rate_creates"});
      co_return api::errors::rate_creates(tenant.max_creates_per_minute, wait);
    }
  }
  Admission admission(*this, tenant.id, asked);
  if (auto room = co_await wait_for_room(driver_name, admission, cancel); !room) {
    // Nothing started: the create does not count against the tenant's rate.
    if (tenant.max_creates_per_minute > 0)
      rates_.give_back(tenant.id, tenant.max_creates_per_minute);
    co_return room.error();
  }

  // A warm pool's sandbox, if one serves this spec; else one started now. A pooled browser
  // has its profile already: a spec with a saved one starts its own.
  if (auto pooled = spec.profile || seed ? nullptr : take_pooled(spec, driver_name)) {
    if (auto r = claim(pooled, spec, tenant); !r) co_return r.error();
    admission.release();  // counted in live_ from now on
    co_return co_await ready_claimed(std::move(pooled));
  }

  store::SessionRecord rec = new_record(api::new_session_id(), driver_name, spec, tenant);
  std::filesystem::path profile;
  // A profile dir is a tmpfs of its own as large as the sandbox's home: the sandbox writes it,
  // and the host's disk is no place for that.
  const uint64_t profile_bytes = drivers::sandbox_tmpfs_bytes(memory_bytes(spec));
  if (spec.profile) {
    auto out = check_out_profile(*spec.profile, tenant.id, rec.id, profile_bytes);
    if (!out) co_return out.error();
    profile = std::move(*out);
  }
  // A fork's child that copies the source's machine has its profile in that machine's memory.
  const bool seed_profile_dir = seed && !seed->machine;
  if (seed_profile_dir) {
    auto out = seed_profile(rec.id, seed->archive, profile_bytes);
    if (!out) co_return out.error();
    profile = std::move(*out);
  }
  // Until the session is live, a start that goes wrong gives the profile back unchanged.
  auto give_back_profile = [&] {
    if (spec.profile) check_in_profile(rec.id, *spec.profile, false);
    if (seed_profile_dir) remove_profile_dir(rec.id);
  };
  if (auto r = store_.insert(rec); !r) {
    give_back_profile();
    co_return r.error();
  }

  const bool egress = config_.egress.enabled && info.supports_egress;
  std::shared_ptr<egress::SessionCa> ca;
  auto sb = sandbox_spec(rec, spec, egress, ca);
  if (!sb) {
    (void)store_.set_status(rec.id, store::SessionStatus::kFailed, sb.error().message,
                            clock_.unix_seconds());
    give_back_profile();
    co_return sb.error();
  }
  sb->profile_dir = profile;
  // A profile or a fork's seed needs a browser that starts from it: never a template's copy.
  std::shared_ptr<Template> machine = seed ? seed->machine : nullptr;
  auto started = co_await start_sandbox(driver_name, spec, *sb, spec.profile || seed,
                                        std::move(machine), ca);
  if (!started) {
    give_back_profile();
    log()->warn("session {}: sandbox did not start: {}", rec.id, started.error().message);
    (void)store_.set_status(rec.id, store::SessionStatus::kFailed, started.error().message,
                            clock_.unix_seconds());
    co_return make_error(Errc::kUnavailable, "sandbox_unavailable",
                         "sandbox could not start: " + started.error().message);
  }
  auto s = std::make_shared<Session>(rec, spec, std::move(started->sandbox),
                                     started->first_secret, ex_);
  s->ca_ = std::move(ca);
  s->own_profile_ = seed_profile_dir;
  live_[rec.id] = s;
  admission.release();  // counted in live_ from now on
  watch(s);

  Result<void> ready = co_await make_ready(s, started->from, *sb, egress);
  if (ready && seed_profile_dir) ready = co_await s->agent_.set_browser_state(seed->state);
  if (!ready) {
    std::string reason = ready.error().message;
    // A sandbox that died while starting ends the wait with little to say; its end says why.
    if (s->ending_ && !s->record().end_reason.empty()) reason = s->record().end_reason;
    if (reason.empty()) reason = "the sandbox stopped without saying why (see the session's logs)";
    log()->warn("session {}: browser did not become ready: {}", rec.id, reason);
    co_await finish(s, store::SessionStatus::kFailed, reason);
    co_return make_error(Errc::kUnavailable, "sandbox_unavailable",
                         "sandbox did not become ready: " + reason);
  }
  if (s->ending_) {
    co_return make_error(Errc::kUnavailable, "sandbox_unavailable",
                         "session ended while starting: " + s->record().end_reason);
  }
  s->record_.status = store::SessionStatus::kRunning;
  (void)store_.set_status(rec.id, store::SessionStatus::kRunning, "", 0);
  start_running(s);
  log()->info("session {}: running on {} ({}x{})", rec.id, driver_name, rec.width, rec.height);
  co_return s;
}

store::SessionRecord SessionManager::new_record(std::string id, const std::string& driver,
                                               const api::SessionSpec& spec,
                                               const Tenant& tenant) const {
  store::SessionRecord rec;
  rec.id = std::move(id);
  rec.driver = driver;
  rec.status = store::SessionStatus::kStarting;
  rec.width = spec.resolution.width;
  rec.height = spec.resolution.height;
  rec.start_url = spec.start_url.empty() ? "about:blank" : spec.start_url;
  rec.timeout_s = spec.timeout_s;
  rec.created_at = clock_.unix_seconds();
  rec.expires_at = rec.created_at + spec.timeout_s;
  rec.idle_timeout_s = spec.idle_timeout_s;
  rec.on_idle = std::string(api::on_idle_name(spec.on_idle));
  rec.owner = tenant.id;
  return rec;
}

Result<drivers::SandboxSpec> SessionManager::sandbox_spec(const store::SessionRecord& rec,
                                                          const api::SessionSpec& spec,
                                                          bool egress,
                                                          std::shared_ptr<egress::SessionCa>& ca) const {
  drivers::SandboxSpec sb;
  sb.session_id = rec.id;
  sb.agent_secret = random_hex(32);
  sb.width = spec.resolution.width;
  sb.height = spec.resolution.height;
  sb.start_url = spec.start_url;
  sb.wait_until = std::string(api::wait_until_name(spec.wait_until));
  sb.memory_bytes = memory_bytes(spec);
  sb.vcpus = spec.resources.vcpus;
  sb.pids_max = config_.pids_max;
  if (egress) {
    sb.egress_proxy_port = config_.egress.port;
    auto made = egress::SessionCa::create(rec.id);
    if (!made) {
      return make_error(Errc::kUnavailable, "sandbox_unavailable",
                        "the session's CA: " + made.error().message);
    }
    ca = std::move(*made);
    sb.trusted_ca_pem = ca->certificate_pem() + config_.egress.extra_ca_pem;
  }
  return sb;
}

void SessionManager::start_running(const SessionPtr& s) {
  const std::string id = s->id();
  arm_expiry(*s);
  s->now_ = [this] { return clock_.unix_seconds(); };
  s->on_idle_ = [this, id, pause = s->record().on_idle == "pause"] {
    cabin::spawn(
        ex_,
        [this, id, pause]() -> net::awaitable<void> {
          if (pause) {
            if (auto r = co_await this->pause(id); !r)
              log()->warn("session {}: not paused when idle: {}", id, r.error().message);
          } else {
            (void)co_await end(id, "idle");
          }
        },
        "session " + id + ": idle");
  };
  s->on_network_change_ = [this, weak = std::weak_ptr<Session>(s)] {
    if (auto live = weak.lock()) save_handoff(*live);
  };
  save_handoff(*s);
  s->idle_again();
  if (!s->following_browser_) {
    s->following_browser_ = true;
    cabin::spawn(ex_, follow_browser(s), "session " + id + ": the browser's events");
  }
}

net::awaitable<void> SessionManager::follow_browser(std::weak_ptr<Session> weak) {
  uint64_t since = 0;
  auto delay = std::chrono::seconds(1);
  net::steady_timer wait(ex_);
  for (;;) {
    std::optional<Tunnel> stream;
    {
      auto s = weak.lock();
      if (!s || s->ending_ || s->released_) co_return;
      if (!s->paused()) {
        auto opened = co_await s->agent_.browser_events(since);
        if (opened) stream.emplace(std::move(*opened));
      }
    }
    if (stream) {
      std::string pending(static_cast<const char*>(stream->buffer.data().data()),
                          stream->buffer.size());
      boost::system::error_code ec;
      for (;;) {
        const auto nl = pending.find('\n');
        if (nl == std::string::npos) {
          if (pending.size() > agent_protocol::kMaxEventLine) break;
          char chunk[16 * 1024];
          const size_t n = co_await stream->stream.async_read_some(
              net::buffer(chunk), net::redirect_error(net::use_awaitable, ec));
          if (ec) break;
          pending.append(chunk, n);
          continue;
        }
        const std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (line.empty()) continue;  // the agent's keepalive
        auto ev = agent_protocol::parse_browser_event(line);
        auto s = weak.lock();
        if (!s || s->ending_) co_return;
        if (!ev || ev->seq <= since) {
          log()->warn("session {}: the agent sent a bad event: {}", s->id(),
                      ev ? "an old sequence number" : ev.error().message);
          break;
        }
        since = ev->seq;
        delay = std::chrono::seconds(1);
        if (ev->type == "download_finished") {
          s->downloads_.push_back(ev->fields);
          while (s->downloads_.size() > Session::kMaxDownloads) s->downloads_.pop_front();
        }
        s->events_->emit(ev->type, std::move(ev->fields));
      }
    }
    wait.expires_after(delay);
    delay = std::min<std::chrono::seconds>(delay * 2, std::chrono::seconds(30));
    boost::system::error_code ignored;
    co_await wait.async_wait(net::redirect_error(net::use_awaitable, ignored));
  }
}

void SessionManager::save_handoff(const Session& s) {
  nlohmann::json h = {{"version", 1},
                      {"secret", s.agent_.secret()},
                      {"sandbox", s.sandbox_->handoff()},
                      {"devtools_port", s.devtools_port_},
                      {"browser_path", s.browser_path_}};
  if (const auto& d = s.spec().display) h["display"] = {{"width", d->width}, {"height", d->height}};
  if (const auto& p = s.spec().profile) h["profile"] = {{"id", p->id}, {"persist", p->persist}};
  if (s.own_profile_) h["own_profile"] = true;
  if (auto policy = s.network(); policy && !policy->source.empty()) {
    h["network"] = policy->source;
    nlohmann::json placeholders = nlohmann::json::object();
    for (const auto& secret : policy->secrets) placeholders[secret.name] = secret.placeholder;
    h["placeholders"] = std::move(placeholders);
  }
  if (s.ca_) {
    auto key = s.ca_->key_pem();
    if (key) h["ca"] = {{"cert", s.ca_->certificate_pem()}, {"key", *key}};
  }
  auto sealed = seal(config_.handoff_key, h.dump());
  if (!sealed) {
    log()->warn("session {}: its handoff could not be sealed", s.id());
    return;
  }
  if (auto r = store_.set_handoff(s.id(), *sealed); !r)
    log()->warn("session {}: its handoff was not saved: {}", s.id(), r.error().message);
}

void SessionManager::arm_expiry(Session& s) {
  const auto& rec = s.record_;
  // Against the clock's own time, not its whole seconds, which would move the end by up to one.
  const std::chrono::system_clock::time_point at{std::chrono::seconds(rec.expires_at)};
  s.expiry_.expires_after(
      std::chrono::duration_cast<std::chrono::milliseconds>(at - clock_.now()));
  s.expiry_.async_wait([this, id = rec.id](boost::system::error_code ec) {
    if (ec) return;
    cabin::spawn(
        ex_, [this, id]() -> net::awaitable<void> { (void)co_await end(id, "timeout"); },
        "session " + id + ": end at its timeout");
  });
}

Result<SessionPtr> SessionManager::live(const std::string& id) const {
  if (SessionPtr s = find(id)) return s;
  auto r = store_.get(id);
  if (r && !store::is_live(r->status)) {
    return api::errors::session_ended(
        r->end_reason.empty() ? std::string(store::to_string(r->status)) : r->end_reason);
  }
  return api::errors::session_not_found();
}

Result<store::SessionRecord> SessionManager::keepalive(const std::string& id) {
  auto s = live(id);
  if (!s) return s.error();
  (*s)->idle_again();
  return (*s)->record();
}

net::awaitable<Result<store::SessionRecord>> SessionManager::pause(const std::string& id,
                                                                   PauseMode mode) {
  co_return co_await set_paused(id, true, mode);
}

net::awaitable<Result<store::SessionRecord>> SessionManager::resume(const std::string& id) {
  co_return co_await set_paused(id, false, PauseMode::kFreeze);
}

net::awaitable<Result<store::SessionRecord>> SessionManager::set_paused(const std::string& id,
                                                                        bool pause,
                                                                        PauseMode mode) {
  auto found = live(id);
  if (!found) co_return found.error();
  SessionPtr s = std::move(*found);
  const bool hibernate = pause && mode == PauseMode::kHibernate;
  // Already so; a frozen session may still be hibernated, and a hibernated one stays so.
  if (pause ? s->paused() && (s->hibernated() || !hibernate) : s->running()) co_return s->record();
  if (!(pause ? s->running() || s->paused() : s->paused()))
    co_return api::errors::cannot_pause("the session is still starting");
  if (s->pausing_) co_return api::errors::cannot_pause("a pause or resume is under way");
  if (hibernate) {
    auto d = drivers_.find(s->record().driver);
    if (d == drivers_.end() || !d->second->info().supports_hibernate) {
      co_return api::errors::cannot_pause("the " + s->record().driver +
                                          " driver cannot hibernate a session");
    }
  }
  const bool waking = !pause && s->hibernated();
  const char* verb = hibernate ? "hibernate" : waking ? "wake" : pause ? "pause" : "resume";
  s->pausing_ = true;
  const auto began = std::chrono::steady_clock::now();
  Result<void> r;
  if (hibernate) {
    r = co_await s->sandbox_->hibernate();
  } else if (pause) {
    r = co_await s->sandbox_->pause();
  } else {
    r = co_await s->sandbox_->resume();
  }
  if (r && waking && !s->ending_) {
    // The machine's clock stopped when it was saved: it gets the host's again, and its RNG fresh
    // bytes (a saved state could be restored twice).
    auto own = co_await make_own(*s, random_hex(32), limits_for(s->record().driver).start_timeout,
                                 false);
    if (!own) {
      s->pausing_ = false;
      log()->warn("session {}: its machine did not answer once woken: {}", id,
                  own.error().message);
      co_await finish(s, store::SessionStatus::kFailed,
                      "the hibernated machine did not answer once woken: " + own.error().message);
      co_return api::errors::session_ended("the hibernated machine did not answer once woken");
    }
  }
  s->pausing_ = false;
  metrics::registry().observe(
      std::string("cabin_session_") + verb + "_seconds", {s->record().driver},
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  if (!r) {
    co_return api::errors::cannot_pause(std::string("the sandbox did not ") + verb + ": " +
                                        r.error().message);
  }
  if (s->ending_) co_return api::errors::session_ended("");
  const auto status = pause ? store::SessionStatus::kPaused : store::SessionStatus::kRunning;
  s->record_.status = status;
  (void)store_.set_status(id, status, "", 0);
  // What a later cabind adopts changed with a hibernation: a file rather than a process.
  if (hibernate || waking) save_handoff(*s);
  // A paused session is never idle; a resumed one's idle time starts again.
  s->idle_timer_.cancel();
  s->idle_again();
  s->events_->emit(pause ? "session_paused" : "session_resumed",
                   pause ? nlohmann::json{{"hibernated", hibernate}} : nlohmann::json::object());
  log()->info("session {}: {}", id,
              hibernate ? "hibernated" : waking ? "woken from hibernation"
                                                : pause ? "paused" : "resumed");
  co_return s->record();
}

Result<store::SessionRecord> SessionManager::set_timers(const std::string& id,
                                                        std::optional<int64_t> timeout_s,
                                                        std::optional<int64_t> idle_timeout_s) {
  auto found = live(id);
  if (!found) return found.error();
  SessionPtr s = std::move(*found);
  auto& rec = s->record_;
  const int64_t now = clock_.unix_seconds();
  const int64_t timeout = timeout_s.value_or(rec.timeout_s);
  const int64_t idle = idle_timeout_s.value_or(std::min(rec.idle_timeout_s, timeout));
  if (rec.created_at + timeout <= now) {
    return invalid_field("timeout_s", "the session has run " +
                                          std::to_string(now - rec.created_at) +
                                          " s already; give more to keep it");
  }
  if (idle > timeout) {
    return invalid_field("idle_timeout_s",
                         "must be at most timeout_s (" + std::to_string(timeout) + ")");
  }
  if (auto r = store_.set_timers(id, timeout, rec.created_at + timeout, idle); !r) return r.error();
  rec.timeout_s = timeout;
  rec.expires_at = rec.created_at + timeout;
  rec.idle_timeout_s = idle;
  arm_expiry(*s);
  s->idle_again();
  log()->info("session {}: timeout {} s, idle timeout {} s", id, timeout, idle);
  return rec;
}

DriverLimits SessionManager::limits_for(const std::string& driver) const {
  auto it = config_.driver_limits.find(driver);
  return it == config_.driver_limits.end() ? DriverLimits{} : it->second;
}

net::awaitable<Result<void>> SessionManager::wait_ready(Session& s,
                                                        std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Error last = make_error(Errc::kTimeout, "start_timeout", "timed out");
  while (!s.ending_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    auto h = co_await s.agent_.health(static_cast<int>(std::min<int64_t>(left.count(), 60000)));
    if (h && h->state == "ready") {
      s.devtools_port_ = h->devtools_port;
      s.browser_path_ = h->browser_path;
      co_return Result<void>{};
    }
    if (h && h->state == "failed") {
      co_return make_error(Errc::kUnavailable, "browser_failed", h->error);
    }
    if (!h) last = h.error();
    // The agent may not have bound its socket yet.
    co_await sleep_for(std::chrono::milliseconds(5));
  }
  if (s.ending_) {
    co_return make_error(Errc::kUnavailable, "sandbox_exited", s.record().end_reason);
  }
  // What the machine was doing, for the operator who finds a start that never finished.
  const std::string report = co_await s.sandbox_->stall_report();
  if (!report.empty()) {
    log()->warn("session {}: not ready after {} ms; its machine: {}", s.id(), timeout.count(),
                report);
  }
  co_return make_error(Errc::kTimeout, "start_timeout",
                       "no ready answer within " + std::to_string(timeout.count()) + " ms (" +
                           last.message + ")");
}

void SessionManager::watch(SessionPtr s) {
  cabin::spawn(
      ex_,
      [this, s]() -> net::awaitable<void> {
        std::string why = co_await s->sandbox_->wait_exit();
        if (s->pooled_) {
          log()->warn("pooled sandbox {} exited: {}", s->id(), why);
          co_await drop_pooled(s);
          co_return;
        }
        if (!s->ending_ && !s->released_) {
          log()->warn("session {}: sandbox exited: {}", s->id(), why);
          // Nothing in a live session exits on its own unless something broke.
          co_await finish(s, store::SessionStatus::kFailed, "sandbox exited: " + why);
        }
      },
      "session " + s->id() + ": watch its sandbox");
}

net::awaitable<Result<store::SessionRecord>> SessionManager::end(const std::string& id,
                                                                 const std::string& reason) {
  auto it = live_.find(id);
  if (it == live_.end()) {
    if (auto r = store_.get(id)) co_return *r;  // already ended: idempotent
    co_return api::errors::session_not_found();
  }
  SessionPtr s = it->second;
  if (!s->ending_) co_await finish(s, store::SessionStatus::kEnded, reason);
  co_return s->record();
}

net::awaitable<void> SessionManager::finish(SessionPtr s, store::SessionStatus status,
                                            std::string reason) {
  if (s->ending_) co_return;
  s->ending_ = true;
  const bool started = s->record_.status != store::SessionStatus::kStarting;
  const bool was_running = s->record_.status == store::SessionStatus::kRunning;
  s->record_.status = store::SessionStatus::kEnding;
  s->expiry_.cancel();
  s->idle_timer_.cancel();
  s->release_control("session_ended");
  // Recordings are kept: stopped and copied out while the sandbox still runs, all within one
  // bound, after which what is left of them is kept as failed.
  std::vector<std::string> recording_ids;
  for (const auto& [rid, r] : s->recordings_) recording_ids.push_back(rid);
  const auto recordings_until = std::chrono::steady_clock::now() + config_.recording_copy_timeout;
  for (const auto& rid : recording_ids) (void)co_await finish_recording(s, rid, recordings_until);
  if (s->egress_) s->egress_->stop();
  const auto& profile = s->spec().profile;
  bool save_profile = profile && profile->persist && started;
  if (save_profile && was_running) {
    // Chromium writes cookies and storage out when it closes; killed, it loses the last ones.
    auto closed = co_await s->agent_.close_browser(kProfileCloseTimeout);
    if (!closed) {
      log()->warn("session {}: the browser did not close cleanly: {}", s->id(),
                  closed.error().message);
    }
    // A VM's agent leaves the profile on the VM's own disk once the browser closed: it replaces
    // what the session's dir held. Without it the profile keeps its last save.
    auto left = s->sandbox_->guest_profile();
    if (left && *left && closed) {
      if (auto r = replace_profile_dir(s->id(), **left); !r) left = r.error();
    }
    if (!left || (*left && !closed)) {
      if (!left) {
        log()->warn("session {}: its profile could not be read back: {}", s->id(),
                    left.error().message);
      }
      save_profile = false;
    }
  }
  co_await s->sandbox_->destroy();
  if (profile) check_in_profile(s->id(), *profile, save_profile);
  if (s->own_profile_) remove_profile_dir(s->id());
  if (!config_.logs_dir.empty()) {
    // Kept for debugging after the sandbox is gone; bounded by the driver's tail.
    std::ofstream out(config_.logs_dir / (s->id() + ".log"), std::ios::trunc);
    for (const auto& line : s->sandbox_->recent_output()) out << line << '\n';
  }
  auto& rec = s->record_;
  rec.status = status;
  rec.end_reason = reason;
  rec.ended_at = clock_.unix_seconds();
  s->events_->emit("session_ended", {{"status", store::to_string(status)}, {"reason", reason}});
  s->events_->close();
  live_.erase(rec.id);
  room_.notify_all();  // a queued create may start now
  // A start that failed is counted by its create; this is the end of a session that ran.
  record_end(rec.id, status, reason, rec.ended_at, started);
}

Result<std::filesystem::path> SessionManager::check_out_profile(const api::ProfileUse& use,
                                                               const std::string& owner,
                                                               const std::string& session,
                                                               uint64_t bytes) {
  CABIN_ASSIGN_OR_RETURN(const auto dir, empty_profile_dir(session, bytes));
  auto out = profiles_->check_out(use.id, owner, session, dir);
  if (!out) {
    remove_profile_dir(session);
    return out.error();
  }
  return dir;
}

Result<std::filesystem::path> SessionManager::empty_profile_dir(const std::string& session,
                                                                uint64_t bytes) {
  const auto dir = profile_dir(session);
  remove_profile_dir(session);
  std::error_code ec;
  std::filesystem::create_directories(profiles_live_, ec);
  if (!std::filesystem::create_directory(dir, ec) || ec) {
    return make_error(Errc::kInternal, "profile_io",
                      "cannot make the session's profile dir: " + ec.message());
  }
  // The sandbox's group's too, as the home it lies in: exec'd commands run in that group.
  std::filesystem::permissions(
      dir, std::filesystem::perms::owner_all | std::filesystem::perms::group_all,
      std::filesystem::perm_options::replace, ec);
  // Without root there is no mount, and no cgroup limits either (the driver says so).
  if (::geteuid() == 0) {
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0770";
    if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                options.c_str()) != 0) {
      const int err = errno;
      std::filesystem::remove(dir, ec);
      return make_error(Errc::kInternal, "profile_io",
                        "cannot mount the session's profile dir: " + std::string(strerror(err)));
    }
  }
  return dir;
}

void SessionManager::remove_profile_dir(const std::string& session) const {
  const auto dir = profile_dir(session);
  // Detached first: removing a tmpfs's files one by one would only be slower.
  (void)::umount2(dir.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

Result<void> SessionManager::replace_profile_dir(const std::string& session,
                                                std::string_view archive) const {
  const auto dir = profile_dir(session);
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    std::filesystem::remove_all(it->path(), ec);
  if (ec) {
    return make_error(Errc::kInternal, "profile_io",
                      "cannot empty the session's profile dir: " + ec.message());
  }
  // The archive came from the sandbox: unpack() checks every entry before it writes.
  return profiles::unpack(archive, dir);
}

Result<std::filesystem::path> SessionManager::seed_profile(const std::string& session,
                                                           const std::string& archive,
                                                           uint64_t bytes) {
  CABIN_ASSIGN_OR_RETURN(const auto dir, empty_profile_dir(session, bytes));
  if (auto r = profiles::unpack(archive, dir); !r) {
    remove_profile_dir(session);
    return r.error();
  }
  // Copied from a browser that is still running: its preferences say it crashed, which a new
  // one would offer to restore.
  profiles::mark_exited_cleanly(dir);
  return dir;
}

net::awaitable<Result<SessionManager::Forked>> SessionManager::fork(const std::string& id,
                                                                    int count,
                                                                    const Tenant& tenant) {
  CABIN_CO_ASSIGN_OR_RETURN(SessionPtr source, live(id));
  if (count < 1 || count > kMaxForks)
    co_return invalid_field("count", "must be 1.." + std::to_string(kMaxForks));
  if (source->paused()) co_return api::errors::session_paused();
  if (!source->running()) co_return api::errors::session_ended("");
  const std::string driver = source->record().driver;
  auto d = drivers_.find(driver);
  const auto info = d == drivers_.end() ? drivers::DriverInfo{} : d->second->info();
  ForkSeed seed;
  if (info.supports_snapshots) {
    auto saved = co_await source->sandbox_->save_running();
    if (!saved) {
      co_return make_error(Errc::kUnavailable, "sandbox_unavailable",
                           "the source's machine could not be saved: " + saved.error().message);
    }
    // A one-off template: the children are copies of it, made their own as any copy is.
    seed.machine = std::make_shared<Template>();
    seed.machine->state = Template::State::kReady;
    seed.machine->snapshot = std::move(*saved);
    seed.machine->secret = source->agent_.secret();
    seed.machine->ca = source->ca_;
  } else if (info.supports_profiles && !profiles_live_.empty()) {
    CABIN_CO_ASSIGN_OR_RETURN(seed.state, co_await source->agent_.browser_state());
    auto tree = source->sandbox_->open_browser_profile();
    if (!tree) co_return tree.error();
    auto packed = profiles::pack_at(tree->get(), {}, profiles::kChromiumCacheDirs);
    if (!packed) co_return packed.error();
    seed.archive = std::move(*packed);
  } else {
    co_return invalid_request("sessions on the " + driver +
                              " driver cannot be forked: their browser's state is not "
                              "reachable from the host");
  }
  const bool memory = seed.machine != nullptr;
  // The children's spec: the source's, with the policy in force now and no saved profile.
  api::SessionSpec spec = source->spec();
  spec.start_url.clear();
  spec.profile.reset();
  if (auto policy = source->network()) spec.network = *policy;
  // The children start side by side, as the creates of as many clients would.
  struct Children {
    explicit Children(net::any_io_executor ex) : done(std::move(ex)) {}
    std::vector<Result<SessionPtr>> made;
    size_t left = 0;
    Notifier done;
  };
  auto children = std::make_shared<Children>(ex_);
  children->made.assign(static_cast<size_t>(count), Result<SessionPtr>(SessionPtr()));
  children->left = static_cast<size_t>(count);
  auto shared_seed = std::make_shared<const ForkSeed>(std::move(seed));
  for (int i = 0; i < count; ++i) {
    cabin::spawn(
        ex_,
        [this, children, shared_seed, spec, driver, tenant, i]() -> net::awaitable<void> {
          children->made[static_cast<size_t>(i)] =
              co_await create_on(spec, driver, tenant, nullptr, shared_seed.get());
          if (--children->left == 0) children->done.notify_all();
        },
        "session " + id + ": fork a child");
  }
  while (children->left > 0) co_await children->done.wait_until(Notifier::Clock::time_point::max());
  std::vector<SessionPtr> made;
  std::optional<Error> failed;
  for (auto& r : children->made) {
    if (r) {
      made.push_back(std::move(*r));
    } else if (!failed) {
      failed = r.error();
    }
  }
  if (failed) {
    for (auto& c : made) (void)co_await end(c->id(), "fork failed");
    co_return *failed;
  }
  log()->info("session {}: forked into {}{}", id, made.size(),
              memory ? ", copies of its running machine" : "");
  co_return Forked{std::move(made), memory};
}

void SessionManager::check_in_profile(const std::string& session, const api::ProfileUse& use,
                                      bool save) {
  if (!profiles_) return;
  const auto dir = profile_dir(session);
  if (auto r = profiles_->check_in(use.id, session, save ? &dir : nullptr, clock_.unix_seconds());
      !r) {
    log()->warn("session {}: profile {} not saved: {}", session, use.id, r.error().message);
  }
  remove_profile_dir(session);
}

void SessionManager::record_end(const std::string& id, store::SessionStatus status,
                                const std::string& reason, int64_t ended_at, bool counted) {
  (void)store_.set_status(id, status, reason, ended_at);
  if (audit_) {
    audit_->record({{"action", "session.end"},
                    {"session", id},
                    {"outcome", store::to_string(status)},
                    {"reason", reason.substr(0, 512)}});
  }
  if (counted)
    metrics::registry().inc("cabin_session_ends_total", {metrics::end_reason_label(reason)});
  log()->info("session {}: {} ({})", id, store::to_string(status), reason);
}

std::filesystem::path SessionManager::network_log_path(const std::string& id) const {
  if (config_.logs_dir.empty()) return {};
  return config_.logs_dir / (id + ".network.jsonl");
}

namespace {

// The agents' egress doors: this many connections wait at each, so that a burst of a page's
// connections is not served one by one.
constexpr size_t kEgressWaiting = 8;

// One connection waiting at the session's agent door, as a TCP socket (a microVM's agent is
// reached over TCP).
net::awaitable<Result<net::ip::tcp::socket>> egress_wait(std::weak_ptr<Session> weak) {
  auto s = weak.lock();
  if (!s) co_return make_error(Errc::kUnavailable, "sandbox_ended", "the session ended");
  auto stream = co_await s->egress_wait();
  if (!stream) co_return stream.error();
  net::ip::tcp::socket out(stream->get_executor());
  boost::system::error_code ec;
  out.assign(net::ip::tcp::v4(), stream->release(), ec);
  if (ec) co_return make_error(Errc::kBadGateway, "agent_error", ec.message());
  co_return out;
}

}  // namespace

net::awaitable<Result<void>> SessionManager::start_egress(SessionPtr s,
                                                          std::chrono::milliseconds timeout) {
  if (s->sandbox_->egress_through_agent()) {
    start_egress_proxy(s);
    s->egress_->serve_reverse(
        ex_, [weak = std::weak_ptr<Session>(s)] { return egress_wait(weak); }, kEgressWaiting);
    co_return Result<void>{};
  }
  // The sandbox's loopback exists once its launcher has built it: moments after create().
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Result<UniqueFd> fd = make_error(Errc::kTimeout, "start_timeout", "timed out");
  while (!s->ending_) {
    fd = s->sandbox_->listen_loopback(config_.egress.port);
    if (fd || std::chrono::steady_clock::now() >= deadline) break;
    co_await sleep_for(std::chrono::milliseconds(5));
  }
  if (s->ending_)
    co_return make_error(Errc::kUnavailable, "sandbox_exited", s->record().end_reason);
  if (!fd) {
    co_return make_error(Errc::kUnavailable, "egress_failed",
                         "the egress proxy could not listen in the sandbox: " + fd.error().message);
  }
  net::ip::tcp::acceptor listener(ex_);
  boost::system::error_code ec;
  listener.assign(net::ip::tcp::v4(), fd->release(), ec);
  if (ec) {
    co_return make_error(Errc::kUnavailable, "egress_failed",
                         "the egress proxy's listener: " + ec.message());
  }
  start_egress_proxy(s);
  cabin::spawn(ex_, s->egress_->serve(std::move(listener)),
               "session " + s->id() + ": egress proxy");
  co_return Result<void>{};
}

void SessionManager::start_egress_proxy(const SessionPtr& s) {
  const auto& e = config_.egress;
  auto policy = std::make_shared<const egress::Policy>(s->spec().network ? *s->spec().network
                                                                         : e.default_policy);
  s->network_log_ = std::make_shared<egress::NetworkLog>(network_log_path(s->id()));
  // The proxy's last connections may finish after the session: they keep the log alive.
  s->egress_ = std::make_shared<egress::EgressProxy>(
      s->id(), std::move(policy), e.boundary, e.resolver, e.limits,
      [log = s->network_log_](egress::EgressRecord r) {
        auto& m = metrics::registry();
        m.inc("cabin_egress_decisions_total", {r.kind, r.allowed ? "allow" : "deny"});
        m.inc("cabin_egress_bytes_total", {"up"}, static_cast<double>(r.bytes_up));
        m.inc("cabin_egress_bytes_total", {"down"}, static_cast<double>(r.bytes_down));
        log->append(std::move(r));
      });
  s->egress_->set_tls(s->ca_, e.upstream_tls);
  s->egress_->set_default_upstream(e.upstream_proxy);
  s->egress_->set_server_bodies(egress_bodies_);
}

std::optional<std::vector<std::string>> SessionManager::network_log(const std::string& id,
                                                                    uint64_t since) const {
  if (auto s = find(id); s && s->network_log()) {
    std::vector<std::string> out;
    for (const auto& r : s->network_log()->since(since))
      out.push_back(egress::record_json(r).dump());
    return out;
  }
  if (!store_.get(id) || config_.logs_dir.empty()) return std::nullopt;
  return egress::NetworkLog::read_file(network_log_path(id), since);
}

Result<uint32_t> SessionManager::revoke_tokens(const std::string& id) {
  SessionPtr s = find(id);
  if (!s) return api::errors::session_not_found();
  uint32_t next = s->record_.token_generation + 1;
  if (auto r = store_.set_token_generation(id, next); !r) return r.error();
  s->record_.token_generation = next;
  log()->info("session {}: tokens revoked (generation {})", id, next);
  return next;
}

std::optional<std::vector<std::string>> SessionManager::output(const std::string& id) const {
  if (auto it = live_.find(id); it != live_.end()) return it->second->sandbox_->recent_output();
  if (config_.logs_dir.empty() || !store_.get(id)) return std::nullopt;
  std::ifstream in(config_.logs_dir / (id + ".log"));
  if (!in) return std::nullopt;
  std::vector<std::string> lines;
  for (std::string line; lines.size() < 1000 && std::getline(in, line);) lines.push_back(line);
  return lines;
}

net::awaitable<void> SessionManager::shutdown(std::chrono::milliseconds deadline,
                                              bool keep_running) {
  struct Pending {
    explicit Pending(net::any_io_executor ex) : done(std::move(ex)) {}
    size_t left = 0;
    Notifier done;
  };
  auto pending = std::make_shared<Pending>(ex_);
  std::vector<SessionPtr> all;  // finish() erases from live_
  for (auto& [_, s] : live_) {
    if (keep_running && !s->ending_ && (s->running() || s->paused() || s->pausing_)) {
      // Left as it is for the next cabind: the sandbox runs on, the record stays live.
      s->released_ = true;
      s->expiry_.cancel();
      s->idle_timer_.cancel();
      if (s->egress_) s->egress_->stop();
      s->sandbox_->release();
      continue;
    }
    all.push_back(s);
  }
  if (keep_running) {
    log()->info("shutdown: {} sessions left running for the next cabind",
                live_.size() - all.size());
  }
  pending->left = all.size();
  for (auto& s : all) {
    cabin::spawn(
        ex_,
        [this, s, pending]() -> net::awaitable<void> {
          co_await finish(s, store::SessionStatus::kEnded, "server shutdown");
          if (--pending->left == 0) pending->done.notify_all();
        },
        "session " + s->id() + ": end at shutdown");
  }
  const auto until = std::chrono::steady_clock::now() + deadline;
  // The pools' sandboxes are no one's: they go either way, beside the sessions.
  co_await destroy_pools(until);
  while (pending->left > 0 && std::chrono::steady_clock::now() < until)
    co_await pending->done.wait_until(until);
  if (pending->left > 0)
    log()->warn("shutdown: {} sessions still ending after {} ms", pending->left, deadline.count());
}

net::awaitable<std::set<std::string>> SessionManager::adopt_all() {
  std::set<std::string> adopted;
  const int64_t now = clock_.unix_seconds();
  size_t ended = 0, failed = 0;
  for (const auto& rec : store_.list(false, 100000)) {
    auto end_record = [&](store::SessionStatus status, const std::string& reason) {
      record_end(rec.id, status, reason, clock_.unix_seconds(), true);
    };
    if (rec.status != store::SessionStatus::kRunning && rec.status != store::SessionStatus::kPaused) {
      // Killed by the drivers' leftover cleanup: a start or an end was cut short.
      (void)store_.set_status(rec.id, store::SessionStatus::kFailed,
                              "server restarted while the session was " +
                                  std::string(store::to_string(rec.status)),
                              now);
      ++failed;
      continue;
    }
    if (rec.expires_at <= now) {
      end_record(store::SessionStatus::kEnded, "timeout");
      ++ended;
      continue;
    }
    auto s = co_await adopt(rec);
    if (!s) {
      end_record(store::SessionStatus::kFailed,
                 "sandbox lost while the server was down: " + s.error().message);
      ++failed;
      continue;
    }
    adopted.insert(rec.id);
  }
  if (!adopted.empty() || ended || failed) {
    log()->info("start-up: {} sessions adopted, {} ended at their timeout, {} lost",
                adopted.size(), ended, failed);
  }
  co_return adopted;
}

void SessionManager::reap_leftovers(const std::set<std::string>& adopted) {
  for (auto& [_, d] : drivers_) d->reap_leftovers(adopted);
  if (!profiles_) return;
  // Profiles of sessions that did not come back keep what they had saved before.
  for (const auto& id : profiles_->release_unless(adopted))
    log()->warn("profile {}: its session did not survive the restart; it keeps its last save", id);
  std::error_code ec;
  for (std::filesystem::directory_iterator it(profiles_live_, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!adopted.count(name) && api::valid_session_id(name)) remove_profile_dir(name);
  }
}

net::awaitable<Result<SessionPtr>> SessionManager::adopt(const store::SessionRecord& rec) {
  // The handoff is cabind's own, but a damaged store must not stop the server.
  try {
    co_return co_await adopt_from_handoff(rec);
  } catch (const nlohmann::json::exception& e) {
    co_return make_error(Errc::kNotFound, "no_handoff", std::string("its handoff: ") + e.what());
  }
}

net::awaitable<Result<SessionPtr>> SessionManager::adopt_from_handoff(
    const store::SessionRecord& rec) {
  const auto began = std::chrono::steady_clock::now();
  auto d = drivers_.find(rec.driver);
  if (d == drivers_.end())
    co_return make_error(Errc::kNotFound, "no_handoff", "no driver " + rec.driver + " here");
  auto opened = open_sealed(config_.handoff_key, store_.handoff(rec.id));
  if (!opened) {
    co_return make_error(Errc::kNotFound, "no_handoff",
                         "its handoff cannot be opened (no key in the run dir, or another one)");
  }
  auto h = parse_object(*opened);
  if (!h || !h->is_object() || !h->contains("sandbox"))
    co_return make_error(Errc::kNotFound, "no_handoff", "nothing was kept to adopt it by");
  const auto secret = h->value("secret", std::string());
  if (secret.empty())
    co_return make_error(Errc::kNotFound, "no_handoff", "the agent's secret was not kept");

  api::SessionSpec spec;
  spec.driver = rec.driver;
  spec.resolution = {rec.width, rec.height};
  spec.timeout_s = rec.timeout_s;
  spec.idle_timeout_s = rec.idle_timeout_s;
  spec.on_idle = rec.on_idle == "pause" ? api::OnIdle::kPause : api::OnIdle::kDelete;
  spec.start_url = rec.start_url;
  if (auto it = h->find("profile"); it != h->end() && it->is_object()) {
    spec.profile = api::ProfileUse{it->value("id", std::string()), it->value("persist", false)};
  }
  if (auto it = h->find("display"); it != h->end() && it->is_object()) {
    spec.display = api::Resolution{it->value("width", rec.width), it->value("height", rec.height)};
  }
  if (auto it = h->find("network"); it != h->end() && it->is_string()) {
    auto source = parse_object(it->get<std::string>());
    if (!source) co_return make_error(Errc::kNotFound, "no_handoff", "its network policy is lost");
    // The placeholders the sandbox already holds stay valid.
    egress::Policy previous;
    if (auto ph = h->find("placeholders"); ph != h->end() && ph->is_object()) {
      for (const auto& [name, placeholder] : ph->items()) {
        if (!placeholder.is_string()) continue;
        egress::Secret secret_ref;
        secret_ref.name = name;
        secret_ref.placeholder = placeholder.get<std::string>();
        previous.secrets.push_back(std::move(secret_ref));
      }
    }
    auto policy = egress::parse_policy(*source, "network", &previous);
    if (!policy) co_return policy.error();
    spec.network = std::move(*policy);
  }
  std::shared_ptr<egress::SessionCa> ca;
  if (auto it = h->find("ca"); it != h->end() && it->is_object()) {
    auto loaded = egress::SessionCa::load(it->value("cert", std::string()),
                                          it->value("key", std::string()));
    if (!loaded) co_return loaded.error();
    ca = std::move(*loaded);
  }

  auto sandbox = co_await d->second->adopt(rec.id, (*h)["sandbox"]);
  if (!sandbox) co_return sandbox.error();
  auto s = std::make_shared<Session>(rec, std::move(spec), std::move(*sandbox), secret, ex_);
  s->ca_ = std::move(ca);
  s->own_profile_ = h->value("own_profile", false);
  s->devtools_port_ = h->value("devtools_port", 0);
  s->browser_path_ = h->value("browser_path", std::string());
  live_[rec.id] = s;
  watch(s);
  Result<void> ready;
  const auto limits = limits_for(rec.driver);
  if (config_.egress.enabled && d->second->info().supports_egress && s->ca_)
    ready = co_await start_egress(s, limits.start_timeout);
  // A frozen agent answers nothing: a paused session is taken at its record's word.
  if (ready && rec.status == store::SessionStatus::kRunning) {
    auto health = co_await s->agent_.health(0);
    if (!health) {
      ready = health.error();
    } else if (health->state != "ready") {
      ready = make_error(Errc::kUnavailable, "browser_failed", "the agent says " + health->state);
    } else {
      s->devtools_port_ = health->devtools_port;
      s->browser_path_ = health->browser_path;
    }
  }
  if (!ready || s->ending_) {
    const std::string why = ready ? s->record().end_reason : ready.error().message;
    co_await finish(s, store::SessionStatus::kFailed,
                    "sandbox lost while the server was down: " + why);
    co_return make_error(Errc::kUnavailable, "sandbox_unavailable", why);
  }
  start_running(s);
  metrics::registry().observe(
      "cabin_session_adopt_seconds", {rec.driver},
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  log()->info("session {}: adopted on {} ({})", rec.id, rec.driver,
              store::to_string(rec.status));
  co_return s;
}

}  // namespace cabin::sessions
