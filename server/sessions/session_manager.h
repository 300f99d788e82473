// SessionManager: creates sessions on a driver, tracks the live ones, and ends them on DELETE,
// timeout, sandbox death or shutdown, leaving nothing behind.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/agent_protocol.h"
#include "common/cancellation.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/notifier.h"
#include "common/result.h"
#include "server/api/session_spec.h"
#include "server/audit/audit_log.h"
#include "server/drivers/sandbox_driver.h"
#include "server/profiles/profile_store.h"
#include "server/sessions/rate_limiter.h"
#include "server/sessions/session.h"
#include "server/sessions/state_disk.h"
#include "server/store/session_store.h"

namespace cabin::sessions {

struct DriverLimits {
  std::chrono::milliseconds start_timeout{30000};  // sandbox created until DevTools answers
  int max_sessions = 16;                           // live sessions on this driver
  int default_vcpus = 1;   // what a session that asks for none counts against budgets
  bool holds_host = true;  // its sessions hold host memory and CPUs (not "sim")
};

// What sessions hold, counted against a tenant's budgets and the node's memory.
struct Footprint {
  int sessions = 0;
  uint64_t memory_bytes = 0;  // their memory limits
  int vcpus = 0;
  Footprint& operator+=(const Footprint& o) {
    sessions += o.sessions;
    memory_bytes += o.memory_bytes;
    vcpus += o.vcpus;
    return *this;
  }
  Footprint& operator-=(const Footprint& o) {
    sessions -= o.sessions;
    memory_bytes -= o.memory_bytes;
    vcpus -= o.vcpus;
    return *this;
  }
};

// Why `add` does not fit beside `held` under a tenant's budgets (429 quota_sessions,
// quota_memory, quota_vcpus) or the node's memory (503 capacity_memory); 0 and empty limits are
// no bound. `retry_after_s` goes with the refusal.
struct Budget {
  int max_sessions = 0;
  uint64_t max_memory_bytes = 0;
  int max_vcpus = 0;
};
Result<void> check_tenant_budget(const Footprint& held, const Footprint& add, const Budget& b,
                                 int64_t retry_after_s);
Result<void> check_node_memory(uint64_t held, uint64_t add, uint64_t limit, int64_t retry_after_s);

// Egress: each session's way out, through a proxy of cabind's on its sandbox's loopback.
struct EgressConfig {
  bool enabled = false;
  egress::Policy default_policy;  // for sessions whose spec names none (mode none)
  egress::Boundary boundary;
  std::shared_ptr<const egress::Resolver> resolver;
  egress::ProxyLimits limits;
  // Request bodies every session's proxy holds at once (to put a secret into them).
  uint64_t max_held_bodies = 256ull << 20;
  uint16_t port = agent_protocol::kEgressProxyPort;  // on the sandbox's 127.0.0.1
  // How the proxy verifies hosts it talks TLS to (secrets); null: secrets cannot be injected.
  std::shared_ptr<egress::ssl::context> upstream_tls;
  std::string extra_ca_pem;  // --extra-ca-file: trusted in every sandbox too
  std::optional<egress::UpstreamProxy> upstream_proxy;  // --egress-upstream-proxy
};

// A warm pool: this many sandboxes of one driver and screen size kept started, their browser
// ready, for creates whose spec they can serve.
struct PoolConfig {
  std::string driver;
  int width = 1280;
  int height = 800;
  int count = 0;
  std::string name() const {
    return driver + ":" + std::to_string(width) + "x" + std::to_string(height);
  }
};
// "DRIVER:WIDTHxHEIGHT:COUNT" (--pool).
Result<PoolConfig> parse_pool(std::string_view text);
inline constexpr int kMaxPoolSize = 64;

struct ManagerConfig {
  std::string default_driver = "namespace";
  int max_sessions = 16;                           // all drivers together
  std::map<std::string, DriverLimits> driver_limits;  // drivers not named get the defaults
  uint64_t memory_bytes = 2ull << 30;
  std::filesystem::path logs_dir;  // where an ended session's last output is kept; empty: nowhere
  // Where recordings are kept (<dir>/<session>/<recording>.mp4 and .json) until deleted;
  // empty: recordings are refused.
  std::filesystem::path recordings_dir;
  // Recordings are sealed with this at rest (32 bytes; the profiles' key: both outlive reboots),
  // each bound to its session and recording ids; empty: kept in the clear.
  std::string recordings_key;
  // The memory limits of all sessions (live, starting and pooled) together at most; 0: no
  // bound (--sessions-memory-percent of the host's memory).
  uint64_t node_memory_bytes = 0;
  // Creates are refused (503 state_disk_full) while the file system of state_dir has less than
  // this free; 0: never.
  std::filesystem::path state_dir;
  uint64_t state_min_free_bytes = 0;
  // What ended sessions left in logs_dir and recordings_dir is pruned by this
  // (prune_state_now()).
  Retention retention;
  // A recording's stop and copy out of the sandbox end within this (then it is kept as failed),
  // and each read of the copy waits at most recording_stall: a sandbox that stops sending
  // cannot hold a stop, or the end of its session.
  std::chrono::milliseconds recording_copy_timeout{300000};
  std::chrono::milliseconds recording_stall{30000};
  int pids_max = 2048;
  EgressConfig egress;
  // Seals each live session's handoff in the store (auth::load_or_create_key_file); a manager
  // that adopts must have the key of the one that saved.
  std::string handoff_key = random_bytes(32);
  // Creates that find no room wait for it, in order of arrival: this many at most (0: none
  // wait, they are refused at once), each for this long at most.
  int create_queue = 16;
  std::chrono::milliseconds create_queue_timeout{30000};
  std::vector<PoolConfig> pools;
  // Sessions on drivers with snapshots start as copies of a template per shape
  // (session_manager templates.cpp).
  bool templates = true;
};

// One warm pool as it is now.
struct PoolState {
  PoolConfig config;
  int ready = 0;     // started and waiting for a create
  int starting = 0;  // being started
  uint64_t claims = 0;  // creates served from it
  uint64_t misses = 0;  // creates it would have served, had it not been empty
};

// How a pause holds a session: frozen where it is (its memory kept), or hibernated (saved to
// disk whole and its processes ended, their memory freed; on drivers with supports_hibernate).
enum class PauseMode { kFreeze, kHibernate };

// Who asks for a session, and the limits of its own that come before the server's.
struct Tenant {
  std::string id = "admin";        // recorded as its sessions' owner: "admin" or a key's id
  int max_sessions = 0;            // its live sessions at most; 0: only the server's caps
  int max_creates_per_minute = 0;  // 0: no rate of its own
  uint64_t max_memory_bytes = 0;   // its sessions' memory limits together; 0: no budget
  int max_vcpus = 0;               // its sessions' vCPUs together; 0: no budget
  // Its recordings, kept and running (at their max_mb), together; 0: no budget.
  uint64_t max_recordings_bytes = 0;
};

class SessionManager {
 public:
  SessionManager(net::any_io_executor ex, ManagerConfig config,
                 std::map<std::string, std::unique_ptr<drivers::SandboxDriver>> drivers,
                 store::SessionStore& store, const Clock& clock);

  std::vector<drivers::DriverInfo> driver_infos() const;
  // How sessions end is recorded there from now on (null: nowhere).
  void use_audit(audit::AuditLog* log) { audit_ = log; }
  // Saved profiles, and the dir where live sessions' profiles are unpacked (null: a spec with a
  // profile is refused).
  void use_profiles(profiles::ProfileStore* store, std::filesystem::path live_dir) {
    profiles_ = store;
    profiles_live_ = std::move(live_dir);
  }
  profiles::ProfileStore* profiles() const { return profiles_; }
  const ManagerConfig& config() const { return config_; }

  // Answers once the browser's DevTools is reachable, or with the reason it could not start.
  // The tenant's quota and rate are checked first (429 quota_sessions, rate_creates); then a
  // create that finds no room waits for it in the queue, unless it is full (503 capacity), its
  // time there runs out (503 capacity), `cancel` fires (its client left) or the server drains
  // (503 draining). Refusals for room carry a Retry-After estimate.
  net::awaitable<Result<SessionPtr>> create(const api::SessionSpec& spec,
                                            const Tenant& tenant = {},
                                            Cancellation* cancel = nullptr);
  // create() once per Idempotency-Key (per tenant, for kIdempotencyKeep_s): a retry with the
  // same key and body gets the session the first made (`replayed`), live or ended; the same
  // key with another body is 422 idempotency_key_reused; while the first still runs, 409
  // idempotency_in_progress. A create that failed frees its key.
  struct Created {
    store::SessionRecord record;
    bool replayed = false;
  };
  static constexpr int64_t kIdempotencyKeep_s = 86400;
  net::awaitable<Result<Created>> create_once(const api::SessionSpec& spec, const Tenant& tenant,
                                              const std::string& key, const std::string& body_hash,
                                              Cancellation* cancel = nullptr);
  // `count` (1..kMaxForks) new sessions that continue from session `id`'s browser, each its own
  // (id, tokens, a copy of the policy, fresh timers), owned by `tenant`. On the namespace
  // driver each child's Chromium starts from a copy of the source's profile (cookies, storage,
  // IndexedDB) and then gets its live cookies and opens its pages' URLs; pages' memory is not
  // copied. All or nothing: if one child fails, those made are ended. 400 on a driver that
  // cannot, 409 session_paused while the source is paused.
  // On a driver with snapshots (microvm) the source is saved whole while paused a moment, and
  // each child is a copy of that machine, made its own as a template's copies are (`memory`).
  static constexpr int kMaxForks = 16;
  struct Forked {
    std::vector<SessionPtr> sessions;
    bool memory = false;  // the children have the source's running memory, not only its profile
  };
  net::awaitable<Result<Forked>> fork(const std::string& id, int count, const Tenant& tenant);
  // From now on create answers 503 draining (shutdown), queued ones too; /readyz says so.
  void set_draining() {
    draining_ = true;
    room_.notify_all();
  }
  bool draining() const { return draining_; }
  // Live sessions by status and driver, for the metrics.
  std::map<std::pair<std::string, std::string>, int> counts() const;
  // A live session, or nullptr.
  SessionPtr find(const std::string& id) const;
  // The live session, or why there is none: session_ended with its reason, or not found.
  Result<SessionPtr> live(const std::string& id) const;
  // A session's record, live or ended; nullopt when unknown.
  std::optional<store::SessionRecord> record(const std::string& id) const;
  std::vector<store::SessionRecord> list(bool include_ended) const;
  // The same, of one owner's sessions.
  std::vector<store::SessionRecord> list_of(const std::string& owner, bool include_ended) const;
  // An owner's live sessions (ending ones too, until their sandboxes are gone) and its creates
  // under way: what its max_sessions counts.
  int tenant_load(const std::string& owner) const { return tenant_footprint(owner).sessions; }
  // What the tenant's live sessions and creates under way hold.
  Footprint tenant_footprint(const std::string& owner) const;
  // The memory limits of every sandbox there is: live, starting, pooled.
  uint64_t node_memory() const;
  // Prunes ended sessions' logs and recordings by config().retention; what went.
  Pruned prune_state_now();
  // Creates waiting for room now.
  size_t queue_waiting() const { return queue_.size(); }
  // New timers for a live session: its lifetime (from creation; it must end in the future) and
  // its idle timeout (at most the lifetime). Unset: as they are, the idle timeout capped by a
  // shorter lifetime. Returns the updated record.
  Result<store::SessionRecord> set_timers(const std::string& id, std::optional<int64_t> timeout_s,
                                          std::optional<int64_t> idle_timeout_s);
  // Starts a live session's idle time again (never past its lifetime). kNotFound if unknown,
  // session_ended if it has ended.
  Result<store::SessionRecord> keepalive(const std::string& id);

  // Screen recordings (agent_protocol::kRecordingsPath), kept in recordings_dir after the
  // session ends until deleted. Each is a JSON record (docs/api.md).
  using RecordingSpec = api::RecordingSpec;
  // 429 quota_recordings when it could take `tenant` past its max_recordings_bytes.
  net::awaitable<Result<nlohmann::json>> start_recording(const std::string& id,
                                                         const RecordingSpec& spec,
                                                         const Tenant& tenant = {});
  // What `owner`'s recordings take: the files kept, and those running at their max_mb.
  uint64_t recordings_held(const std::string& owner) const;
  net::awaitable<Result<nlohmann::json>> stop_recording(const std::string& id,
                                                        const std::string& rid);
  // A live session's recordings and those kept of it, oldest first.
  Result<std::vector<nlohmann::json>> recordings(const std::string& id) const;
  // The record of one, live or kept; nullopt when neither.
  std::optional<nlohmann::json> recording(const std::string& id, const std::string& rid) const;
  // Where a live one's file is in the sandbox; empty when it is not live.
  std::string live_recording_path(const std::string& id, const std::string& rid) const;
  // The video file of a kept one.
  std::filesystem::path recording_file(const std::string& id, const std::string& rid) const;
  const std::string& recordings_key() const { return config_.recordings_key; }
  static std::string recording_context(const std::string& id, const std::string& rid) {
    return "cabin recording " + id + " " + rid;
  }
  net::awaitable<Result<void>> delete_recording(const std::string& id, const std::string& rid);
  // Freezes a running session: its sandbox stops where it is and uses no CPU, its connections
  // stay open, its lifetime still runs, its idle time does not. Pausing a paused one answers it
  // as it is. cannot_pause while starting, during another pause or resume, or on a driver that
  // cannot. Hibernated, its sandbox is saved to disk and its processes end (its connections with
  // them; clients reconnect through the same URLs after the resume); a frozen one may be
  // hibernated too, and it survives cabind's restart.
  net::awaitable<Result<store::SessionRecord>> pause(const std::string& id,
                                                     PauseMode mode = PauseMode::kFreeze);
  // Continues a paused session where it was; a running one answers as it is. A hibernated one is
  // started again from disk and told the host's clock (as a template's copy is, keeping its
  // machine-id).
  net::awaitable<Result<store::SessionRecord>> resume(const std::string& id);
  // Ends a live session. Returns its final record; kNotFound if unknown.
  net::awaitable<Result<store::SessionRecord>> end(const std::string& id, const std::string& reason);
  // Ends every live session at once, and returns when all are destroyed or `deadline` has
  // passed: one slow sandbox does not hold up the others, nor the server for longer than that.
  // With `keep_running`, running and paused sessions are left to the next cabind instead (their
  // sandboxes keep running, their records stay live); only those still starting are ended.
  net::awaitable<void> shutdown(std::chrono::milliseconds deadline = std::chrono::seconds(30),
                                bool keep_running = false);
  // At start-up, before any request: takes over the sessions an earlier cabind left live. Each
  // running or paused one whose sandbox is still there is adopted (its agent re-dialled, its
  // egress proxy started again, its timers armed from the record); one whose lifetime ran out
  // meanwhile ends as "timeout"; one whose sandbox is gone fails. Returns the adopted ids: the
  // drivers' reap_leftovers() keeps those and kills every other sandbox.
  net::awaitable<std::set<std::string>> adopt_all();
  // The drivers' start-up cleanup, keeping `adopted`.
  void reap_leftovers(const std::set<std::string>& adopted);
  // Starts filling the warm pools, after adoption and the drivers' cleanup (which would kill
  // their sandboxes): each pool starts one sandbox at a time until it is full, and again after
  // every claim. Their sandboxes are not sessions: they count against no cap, and shutdown
  // destroys them.
  void start_pools();
  std::vector<PoolState> pools() const;
  // Each template VM: its driver and shape ("microvm:1280x800:2048M:0"), "building", "ready"
  // or "failed", and how many sessions were started as its copies.
  struct TemplateInfo {
    std::string shape;
    std::string state;
    uint64_t copies = 0;
  };
  std::vector<TemplateInfo> templates() const;
  size_t live_count() const { return live_.size(); }
  // Invalidates every token of a live session by bumping its generation (kept in the store).
  // Returns the new generation; kNotFound if the session is not live.
  Result<uint32_t> revoke_tokens(const std::string& id);
  // The newest output lines of a session: live from its sandbox, ended from the logs dir.
  // nullopt when the session is unknown or nothing was kept.
  std::optional<std::vector<std::string>> output(const std::string& id) const;
  // A session's egress decisions with seq > since, as JSON lines: live from memory, ended from
  // the logs dir. nullopt when the session is unknown or nothing was kept.
  std::optional<std::vector<std::string>> network_log(const std::string& id, uint64_t since) const;

 private:
  struct Admission;
  struct Waiter {
    std::string driver;
    bool cancelled = false;
  };
  // What a fork's children start from: the source's profile, packed, and its cookies and pages.
  struct Template;
  // What a fork's child starts from: the source's packed profile and browser state, or the
  // source's whole machine, saved running.
  struct ForkSeed {
    std::string archive;
    nlohmann::json state;
    std::shared_ptr<Template> machine;
  };
  net::awaitable<Result<SessionPtr>> create_on(const api::SessionSpec& spec,
                                               const std::string& driver_name,
                                               const Tenant& tenant, Cancellation* cancel,
                                               const ForkSeed* seed);
  // Sessions live and starting, in all and per driver.
  struct Load {
    int total = 0;
    std::map<std::string, int> per_driver;
  };
  Load load() const;
  // Whether a session may start on `driver` under the server's and the driver's caps.
  bool has_room(const Load& l, const std::string& driver) const;
  // Waits, in order of arrival, until there is room on `driver`; then takes it (a start on the
  // driver, held by `a`) before anyone else can.
  net::awaitable<Result<void>> wait_for_room(const std::string& driver, Admission& a,
                                             Cancellation* cancel);
  Error no_room(const std::string& driver, const std::string& why) const;
  // Seconds until the soonest of the sessions (of `owner`, or all) ends on its own, 1..3600: a
  // Retry-After that says when room comes at the latest unless someone ends one sooner.
  int64_t soonest_end_s(const std::string* owner) const;
  // A ready (or adopted) session from now on: its lifetime and idle timers, its handoff.
  void start_running(const SessionPtr& s);
  // Stops a live recording, copies its file out of the sandbox into recordings_dir and keeps
  // its record there; the record. Given up as failed at `until` (default: recording_copy_timeout
  // from now).
  net::awaitable<Result<nlohmann::json>> finish_recording(
      const SessionPtr& s, const std::string& rid,
      std::optional<std::chrono::steady_clock::time_point> until = std::nullopt);
  // Carries the agent's browser events (pages, dialogs, downloads) into the session's event
  // log while the session lives, reconnecting after the stream breaks (a pause, a restore).
  net::awaitable<void> follow_browser(std::weak_ptr<Session> weak);
  // A new session's record, status starting, from `spec`.
  store::SessionRecord new_record(std::string id, const std::string& driver,
                                  const api::SessionSpec& spec, const Tenant& tenant) const;
  // What the driver is asked to start for the session `rec` of `spec`: with egress, its proxy's
  // port and the session's new CA (into `ca`), trusted in the sandbox.
  Result<drivers::SandboxSpec> sandbox_spec(const store::SessionRecord& rec,
                                            const api::SessionSpec& spec, bool egress,
                                            std::shared_ptr<egress::SessionCa>& ca) const;
  // A sandbox for pool `p`, started until its browser is ready, or nothing left running.
  net::awaitable<Result<SessionPtr>> start_pooled(const PoolConfig& p);
  // A pool's sandbox for `spec`, out of its pool; null when no pool serves it or it is empty.
  SessionPtr take_pooled(const api::SessionSpec& spec, const std::string& driver);
  // Makes a pooled sandbox the session `spec` asks for: stored and live from now on.
  Result<void> claim(const SessionPtr& s, const api::SessionSpec& spec, const Tenant& tenant);
  // Then gives it the spec's policy and start page, and sets it running.
  net::awaitable<Result<SessionPtr>> ready_claimed(SessionPtr s);
  net::awaitable<void> fill_pool(size_t index);
  // A pool's sandbox that goes without having been a session (it died waiting, its start
  // failed, its claim failed, shutdown): out of its pool, destroyed.
  net::awaitable<void> drop_pooled(SessionPtr s);
  net::awaitable<void> destroy_pools(std::chrono::steady_clock::time_point deadline);
  // A template VM for one shape: booted once to a ready browser, then frozen; sessions of that
  // shape start as its copies (templates.cpp).
  struct Template {
    enum class State { kBuilding, kReady, kFailed };
    State state = State::kBuilding;
    drivers::SnapshotPtr snapshot;
    std::string secret;  // the agent's in every copy, until the copy takes its own
    std::shared_ptr<egress::SessionCa> ca;  // trusted by every copy's browser; its key stays here
    std::chrono::steady_clock::time_point failed_at;
    uint64_t copies = 0;
  };
  // The ready template for a create of `spec` on `driver`, built first if there is none (other
  // creates of that shape wait for that build); null where there is none to be had (off, a
  // driver without snapshots, a profile to start from, a build that failed lately): the create
  // then starts cold.
  net::awaitable<std::shared_ptr<Template>> template_for(const std::string& driver,
                                                         const drivers::DriverInfo& info,
                                                         const api::SessionSpec& spec);
  net::awaitable<Result<void>> build_template(const std::string& driver,
                                              const api::SessionSpec& spec, Template& t);
  // Makes a copy its own machine (new agent secret, the host's clock, a reseeded RNG, a new
  // machine-id).
  net::awaitable<Result<void>> make_own(Session& s, const std::string& secret,
                                        std::chrono::milliseconds timeout,
                                        bool new_machine_id = true);
  // The sandbox `sb` of `spec` on `driver`: a copy of its shape's template where there is one
  // (never with `cold`), else started cold; `from` says which. A copy's browser trusts the
  // template's CA, which then replaces `ca`.
  struct Started {
    drivers::SandboxPtr sandbox;
    std::shared_ptr<Template> from;
    std::string first_secret;  // the agent's until make_ready: the template's, or sb's own
  };
  // `from`: this machine's copy, whatever the spec's shape (a fork's child).
  net::awaitable<Result<Started>> start_sandbox(const std::string& driver,
                                                const api::SessionSpec& spec,
                                                const drivers::SandboxSpec& sb, bool cold,
                                                std::shared_ptr<Template> from,
                                                std::shared_ptr<egress::SessionCa>& ca);
  // Takes the session's first page to its start URL, if it has one, as its spec's wait_until
  // says: for a sandbox whose agent was started without it (a pool's, a template's copy).
  net::awaitable<Result<void>> open_start_page(Session& s);
  // Until the browser of the session `s`, started as `from` says, is ready: a copy made its
  // own machine, the egress proxy's connections (`egress`), the agent's ready, and a copy's
  // start page (a cold start's agent opens it itself).
  net::awaitable<Result<void>> make_ready(const SessionPtr& s, const std::shared_ptr<Template>& from,
                                          const drivers::SandboxSpec& sb, bool egress);
  void template_failed(Template& t, const std::string& why);
  // Keeps what a later cabind needs to adopt the session in the store.
  void save_handoff(const Session& s);
  net::awaitable<Result<SessionPtr>> adopt(const store::SessionRecord& rec);
  net::awaitable<Result<SessionPtr>> adopt_from_handoff(const store::SessionRecord& rec);
  net::awaitable<Result<void>> wait_ready(Session& s, std::chrono::milliseconds timeout);
  DriverLimits limits_for(const std::string& driver) const;
  // The lifetime's timer, at the record's expires_at.
  void arm_expiry(Session& s);
  net::awaitable<Result<store::SessionRecord>> set_paused(const std::string& id, bool pause,
                                                          PauseMode mode);
  void watch(SessionPtr s);
  // Starts the session's egress proxy on its sandbox's loopback, once the sandbox has one.
  net::awaitable<Result<void>> start_egress(SessionPtr s, std::chrono::milliseconds timeout);
  // The session's proxy and log, before it gets its first connection.
  void start_egress_proxy(const SessionPtr& s);
  std::filesystem::path network_log_path(const std::string& id) const;
  net::awaitable<void> finish(SessionPtr s, store::SessionStatus status, std::string reason);
  // The profile `use` names, for a session of `owner`'s: checked and unpacked into its own dir
  // (the profile is that session's until check_in_profile). 404 for another tenant's or none,
  // 409 while another session has it. (create_on has checked that there is a store and that
  // the driver takes profiles.)
  Result<std::filesystem::path> check_out_profile(const api::ProfileUse& use,
                                                  const std::string& owner,
                                                  const std::string& session, uint64_t bytes);
  // The sandbox's memory: the spec's, or the server's default.
  uint64_t memory_bytes(const api::SessionSpec& spec) const {
    return spec.resources.memory_mb > 0 ? spec.resources.memory_mb << 20 : config_.memory_bytes;
  }
  // Gives the profile back, with `save` what the session left in its dir kept from now on,
  // and removes the dir.
  void check_in_profile(const std::string& session, const api::ProfileUse& use, bool save);
  // The session's profile dir, new and empty (0700): a tmpfs of `bytes` when cabind is root.
  Result<std::filesystem::path> empty_profile_dir(const std::string& session, uint64_t bytes);
  // Unmounts and removes it.
  void remove_profile_dir(const std::string& session) const;
  // Its contents replaced by what `archive` holds (a profile a VM's agent left on its disk).
  Result<void> replace_profile_dir(const std::string& session, std::string_view archive) const;
  // A fork child's own dir, filled from its source's packed profile.
  Result<std::filesystem::path> seed_profile(const std::string& session,
                                             const std::string& archive, uint64_t bytes);
  std::filesystem::path profile_dir(const std::string& session) const {
    return profiles_live_ / session;
  }
  // How a session ended, in the store, the audit log, the metrics (if `counted`) and the log.
  void record_end(const std::string& id, store::SessionStatus status, const std::string& reason,
                  int64_t ended_at, bool counted);

  net::any_io_executor ex_;
  ManagerConfig config_;
  std::map<std::string, std::unique_ptr<drivers::SandboxDriver>> drivers_;
  store::SessionStore& store_;
  const Clock& clock_;
  std::map<std::string, SessionPtr> live_;
  std::shared_ptr<egress::ByteBudget> egress_bodies_ =
      std::make_shared<egress::ByteBudget>(config_.egress.max_held_bodies);
  std::map<std::string, int> starting_;  // per driver: sandboxes being created
  bool draining_ = false;
  audit::AuditLog* audit_ = nullptr;
  profiles::ProfileStore* profiles_ = nullptr;
  std::filesystem::path profiles_live_;
  std::map<std::string, Footprint> pending_;  // per owner: creates admitted, not live yet
  // What one session of `spec` on `driver` holds.
  Footprint footprint(const api::SessionSpec& spec, const std::string& driver) const;
  std::list<std::shared_ptr<Waiter>> queue_;  // creates waiting for room, oldest first
  struct Pool {
    PoolState state;
    std::list<SessionPtr> ready;  // oldest first; never claimed twice: a claim takes it out
    int failures = 0;             // starts that failed in a row: the next waits longer
  };
  std::vector<Pool> pools_;  // as configured; not resized after construction
  // Pools' sandboxes started and not ready yet: shutdown destroys them too, or a microVM that
  // boots for longer than the shutdown would outlive it.
  std::set<SessionPtr> pool_starting_;
  std::map<std::string, std::shared_ptr<Template>> templates_;  // by driver and shape
  Notifier templates_changed_{ex_};  // a template's build ended
  // Rung when a pool has room to fill, or a start of one ended.
  Notifier pool_changed_{ex_};
  // Rung whenever room may have come (a session or a start went, a waiter left) and at drain.
  Notifier room_{ex_};
  RateLimiter rates_{clock_};
};

}  // namespace cabin::sessions
