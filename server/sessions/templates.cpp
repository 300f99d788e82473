// SessionManager's templates: one VM per shape booted to a ready browser and frozen, of which
// every session of that shape starts as a copy-on-write copy, then is made its own machine.
#include <time.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/crypto.h"
#include "common/log.h"
#include "server/api/ids.h"
#include "server/sessions/session_manager.h"

namespace cabin::sessions {
namespace {

const auto& template_log() {
  static auto l = logger("templates");
  return l;
}

// A build that failed is not tried again for this long: creates start cold meanwhile.
constexpr std::chrono::seconds kRetryFailedBuild{60};
// How long the agent of a copy gets to make it its own machine (it answers within a second).
constexpr std::chrono::seconds kMakeOwnTimeout{20};
// A copy's clock is set again while the trip that set it took longer than this: the clock is
// off by at most the trip's way in, and a warm trip takes tens of milliseconds under TCG.
constexpr std::chrono::milliseconds kClockRoundTrip{500};
constexpr int kClockTries = 5;

int64_t unix_ns_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

std::vector<SessionManager::TemplateInfo> SessionManager::templates() const {
  std::vector<TemplateInfo> out;
  for (const auto& [shape, t] : templates_) {
    const char* state = t->state == Template::State::kReady      ? "ready"
                        : t->state == Template::State::kBuilding ? "building"
                                                                 : "failed";
    out.push_back({shape, state, t->copies});
  }
  return out;
}

net::awaitable<std::shared_ptr<SessionManager::Template>> SessionManager::template_for(
    const std::string& driver, const drivers::DriverInfo& info, const api::SessionSpec& spec) {
  if (!config_.templates || !info.supports_snapshots || spec.profile) co_return nullptr;
  const std::string key = driver + ":" + std::to_string(spec.resolution.width) + "x" +
                          std::to_string(spec.resolution.height) + ":" +
                          std::to_string(memory_bytes(spec) >> 20) + "M:" +
                          std::to_string(spec.resources.vcpus);
  const auto deadline = std::chrono::steady_clock::now() + limits_for(driver).start_timeout;
  for (;;) {
    auto& slot = templates_[key];
    const bool stale_failure = slot && slot->state == Template::State::kFailed &&
                               std::chrono::steady_clock::now() - slot->failed_at > kRetryFailedBuild;
    if (!slot || stale_failure) {
      // This create builds it; others of the shape wait for the build below.
      auto t = std::make_shared<Template>();
      slot = t;
      template_log()->info("template {}: building", key);
      auto built = co_await build_template(driver, spec, *t);
      if (built) {
        t->state = Template::State::kReady;
        template_log()->info("template {}: ready ({})", key, t->snapshot->describe());
      } else {
        template_failed(*t, built.error().message);
      }
      templates_changed_.notify_all();
      co_return built ? t : nullptr;
    }
    if (slot->state == Template::State::kReady) co_return slot;
    if (slot->state == Template::State::kFailed || draining_) co_return nullptr;
    if (!co_await templates_changed_.wait_until(deadline)) co_return nullptr;
  }
}

net::awaitable<Result<void>> SessionManager::build_template(const std::string& driver,
                                                            const api::SessionSpec& spec,
                                                            Template& t) {
  auto d = drivers_.find(driver);
  const auto info = d->second->info();
  api::SessionSpec tspec;
  tspec.driver = driver;
  tspec.resolution = spec.resolution;
  tspec.resources = spec.resources;
  store::SessionRecord rec = new_record(api::new_session_id(), driver, tspec, Tenant{});
  rec.owner.clear();
  const bool egress = config_.egress.enabled && info.supports_egress;
  // Every copy's browser trusts this CA: its key stays in cabind, which mints each session's
  // certificates with it, so sharing it gives no copy anything it could use on another.
  CABIN_CO_ASSIGN_OR_RETURN(auto sb, sandbox_spec(rec, tspec, egress, t.ca));
  sb.snapshottable = true;
  CABIN_CO_ASSIGN_OR_RETURN(auto sandbox, co_await d->second->create(sb));
  auto s = std::make_shared<Session>(rec, tspec, std::move(sandbox), sb.agent_secret, ex_);
  // Not a session: its watcher drops it if it dies, and shutdown destroys it while it starts.
  s->pooled_ = true;
  watch(s);
  pool_starting_.insert(s);
  if (draining_) s->ending_ = true;
  // No egress connections wait at its agent: a copy would inherit them, dead.
  auto ready = co_await wait_ready(*s, limits_for(driver).start_timeout);
  pool_starting_.erase(s);
  if (ready && (s->ending_ || !s->pooled_))
    ready = make_error(Errc::kUnavailable, "sandbox_exited", "the template VM ended while starting");
  if (!ready) {
    co_await drop_pooled(s);
    co_return ready.error();
  }
  s->pooled_ = false;
  s->ending_ = true;  // its end, below, is the snapshot's doing
  auto snap = co_await s->sandbox_->snapshot();
  if (!snap) co_return snap.error();
  t.snapshot = std::move(*snap);
  t.secret = sb.agent_secret;
  co_return Result<void>{};
}

net::awaitable<Result<void>> SessionManager::make_own(Session& s, const std::string& secret,
                                                      std::chrono::milliseconds timeout,
                                                      bool new_machine_id) {
  agent_protocol::RestoredRequest r;
  r.secret = secret;
  r.seed_hex = random_hex(agent_protocol::kRestoreSeedBytes);
  if (new_machine_id) r.machine_id = random_hex(16);
  const auto deadline = std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(
                                                               timeout, kMakeOwnTimeout);
  for (;;) {
    r.unix_ns = unix_ns_now();
    auto done = co_await s.agent_.restored(r, kMakeOwnTimeout);
    if (done) break;
    // Only a connection that did not get through is tried again: the agent may not accept yet.
    if (done.error().errc != Errc::kUnavailable || s.ending_ ||
        std::chrono::steady_clock::now() >= deadline)
      co_return done;
    net::steady_timer pause(ex_, std::chrono::milliseconds(50));
    co_await pause.async_wait(net::use_awaitable);
  }
  // The clock is set to the host's time when the request left, which the guest's clock misses
  // by the request's trip. The first trip includes the copy's cold start (under TCG its
  // translation cache, its first connection), often half a second; later ones, on a warm path
  // and with the copy's own secret, are far shorter. A trip is at most its round trip, so one
  // that came back quickly has set the clock closely; a starved guest gets a few more tries.
  for (int tries = 0;; ++tries) {
    const auto sent = std::chrono::steady_clock::now();
    r.unix_ns = unix_ns_now();
    auto done = co_await s.agent_.restored(r, kMakeOwnTimeout);
    const auto trip = std::chrono::steady_clock::now() - sent;
    template_log()->debug("session {}: clock set by a trip of {} ms", s.id(),
                          std::chrono::duration_cast<std::chrono::milliseconds>(trip).count());
    if (!done || tries == kClockTries - 1 || trip <= kClockRoundTrip) co_return done;
  }
}

net::awaitable<Result<SessionManager::Started>> SessionManager::start_sandbox(
    const std::string& driver, const api::SessionSpec& spec, const drivers::SandboxSpec& sb,
    bool cold, std::shared_ptr<Template> from, std::shared_ptr<egress::SessionCa>& ca) {
  auto& d = *drivers_.at(driver);
  Started out;
  const bool given = from != nullptr;
  out.from = std::move(from);
  if (!given && !cold) out.from = co_await template_for(driver, d.info(), spec);
  if (out.from) {
    auto copy = co_await d.restore(*out.from->snapshot, sb);
    if (copy) {
      ++out.from->copies;
      out.sandbox = std::move(*copy);
      out.first_secret = out.from->secret;
      ca = out.from->ca ? out.from->ca->share() : nullptr;
      co_return out;
    }
    template_failed(*out.from, "restore: " + copy.error().message);
    if (given) co_return copy.error();  // a copy of that machine, or nothing
    out.from.reset();  // started cold below
  }
  CABIN_CO_ASSIGN_OR_RETURN(out.sandbox, co_await d.create(sb));
  out.first_secret = sb.agent_secret;
  co_return out;
}

net::awaitable<Result<void>> SessionManager::make_ready(const SessionPtr& s,
                                                        const std::shared_ptr<Template>& from,
                                                        const drivers::SandboxSpec& sb,
                                                        bool egress) {
  const auto timeout = limits_for(s->record().driver).start_timeout;
  if (from) {
    if (auto own = co_await make_own(*s, sb.agent_secret, timeout); !own) {
      template_failed(*from, "a copy did not become its own machine: " + own.error().message);
      co_return own.error();
    }
  }
  if (egress) CABIN_CO_TRY(co_await start_egress(s, timeout));
  CABIN_CO_TRY(co_await wait_ready(*s, timeout));
  if (from) CABIN_CO_TRY(co_await open_start_page(*s));
  co_return Result<void>{};
}

net::awaitable<Result<void>> SessionManager::open_start_page(Session& s) {
  const auto& url = s.spec().start_url;
  if (url.empty() || url == "about:blank") co_return Result<void>{};
  auto r = co_await s.agent_.navigate(url, std::string(api::wait_until_name(s.spec().wait_until)),
                                     limits_for(s.record().driver).start_timeout);
  if (!r) {
    co_return make_error(Errc::kUnavailable, "start_page_failed",
                         "the start page: " + r.error().message);
  }
  co_return Result<void>{};
}

void SessionManager::template_failed(Template& t, const std::string& why) {
  if (t.state == Template::State::kFailed) return;
  template_log()->warn("template: {}; creates start cold for {} s", why, kRetryFailedBuild.count());
  t.state = Template::State::kFailed;
  t.failed_at = std::chrono::steady_clock::now();
  t.snapshot.reset();  // its memory goes once the copies that map it have gone
}

}  // namespace cabin::sessions
