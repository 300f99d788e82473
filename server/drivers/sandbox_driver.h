// SandboxDriver / Sandbox: the one interface every isolation mechanism (namespace, microvm) implements.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <algorithm>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace cabin::drivers {

namespace net = boost::asio;

// A connected byte stream to cabin-agent: a UNIX socket (namespace) or TCP (microvm).
using AgentStream = net::generic::stream_protocol::socket;

struct DriverInfo {
  std::string name;        // "namespace", "microvm"
  std::string isolation;   // "namespace" (shares the host kernel) or "microvm"
  std::string detail;      // e.g. "shares the host kernel", "TCG (no working KVM)"
  bool available = false;  // false: create() answers kUnavailable with `unavailable_reason`
  std::string unavailable_reason;
  bool supports_pause = false;
  // Sandboxes reach cabind's egress proxy: a listener cabind holds on their loopback
  // (listen_loopback), or else connections cabind keeps waiting at their agent, which hands
  // each program's connection to one. Otherwise they have no way out at all.
  bool supports_egress = false;
  // Chromium's profile can come from a host dir (SandboxSpec::profile_dir) and be read back
  // from it when the sandbox is gone, or from the sandbox's own disk (Sandbox::guest_profile).
  bool supports_profiles = false;
  // Sandboxes started `snapshottable` can be frozen into a Snapshot (Sandbox::snapshot), from
  // which restore() starts copies.
  bool supports_snapshots = false;
  // Sandboxes can be hibernated (Sandbox::hibernate): saved whole to disk, their processes gone.
  bool supports_hibernate = false;
};

// Immutable input to create(): everything the driver needs, already validated.
struct SandboxSpec {
  std::string session_id;    // validated: [a-z0-9_] only, safe in paths
  std::string agent_secret;  // per-session; cabin-agent refuses requests without it
  int width = 1280;
  int height = 800;
  std::string start_url;     // empty: about:blank
  // When the start page counts as ready: "commit", "load" or "networkidle" (empty: the agent's
  // default, load).
  std::string wait_until;
  uint64_t memory_bytes = 2ull << 30;
  int vcpus = 0;  // 0: the driver's default
  int pids_max = 1024;
  // The port of cabind's egress proxy on the sandbox's loopback, for Chromium and exec'd
  // commands (0: none, and no way out).
  uint16_t egress_proxy_port = 0;
  // PEM certificates the sandbox trusts besides the system's (its Chromium and its commands):
  // the session's CA, and the operator's extra CA.
  std::string trusted_ca_pem;
  // A host dir holding the profile Chromium starts with and writes to (supports_profiles);
  // empty: a fresh one inside the sandbox.
  std::filesystem::path profile_dir;
  // Started so that snapshot() can freeze it (supports_snapshots).
  bool snapshottable = false;
};

// A sandbox frozen whole: its memory and device state, from which its driver starts copies
// (SandboxDriver::restore). Opaque outside that driver; freed with its last holder.
class Snapshot {
 public:
  virtual ~Snapshot() = default;
  virtual std::string describe() const = 0;
};
using SnapshotPtr = std::shared_ptr<const Snapshot>;

// The size of each tmpfs a sandbox writes (its home, /tmp, /dev/shm, a saved profile's dir):
// half its memory, at least 64 MiB. The memory cgroup bounds them together.
inline uint64_t sandbox_tmpfs_bytes(uint64_t memory_bytes) {
  return std::max<uint64_t>(64ull << 20, memory_bytes / 2);
}

class Sandbox {
 public:
  virtual ~Sandbox() = default;
  // One new stream to cabin-agent. May fail while the agent has not bound its socket yet.
  virtual net::awaitable<Result<AgentStream>> dial_agent() = 0;
  // A direct stream to a TCP port on the sandbox's loopback, where the driver can make one
  // without a relay (one hop fewer on the CDP path). kUnavailable otherwise: callers then use
  // the agent's CONNECT tunnel.
  virtual net::awaitable<Result<AgentStream>> dial_loopback(int port) {
    (void)port;
    co_return make_error(Errc::kUnavailable, "not_supported", "no direct path");
  }
  // Chromium's user data directory inside the running sandbox, opened for reading (a fork
  // packs it). kUnavailable where the driver cannot reach it.
  virtual Result<UniqueFd> open_browser_profile() {
    return make_error(Errc::kUnavailable, "not_supported", "the browser's profile is out of reach");
  }
  // Where the driver gave the sandbox its profile on a disk of its own (a VM's): the archive
  // (common/profile_archive.h) its agent left there once the browser closed, read while the
  // sandbox still runs; empty if it left none. nullopt: the profile is the host dir itself.
  virtual Result<std::optional<std::string>> guest_profile() { return std::optional<std::string>(); }
  // A listening socket on the sandbox's loopback at `port`, accepted from by cabind. May fail
  // while the sandbox is not built yet. kUnavailable where the driver has none.
  virtual Result<UniqueFd> listen_loopback(uint16_t port) {
    (void)port;
    return make_error(Errc::kUnavailable, "not_supported", "no listener on the sandbox's loopback");
  }
  // Whether programs in the sandbox reach cabind's egress proxy through the agent's door rather
  // than a listener of cabind's (listen_loopback).
  virtual bool egress_through_agent() const { return false; }
  // Freezes a sandbox started `snapshottable` into a Snapshot; the sandbox itself ends (as
  // destroy() ends it). kUnavailable where the driver cannot.
  virtual net::awaitable<Result<SnapshotPtr>> snapshot() {
    co_return make_error(Errc::kUnavailable, "not_supported", "this sandbox cannot be snapshotted");
  }
  // Saves the whole running sandbox (its memory and state) into a Snapshot, pausing it for as
  // long as that takes; it then runs on. kUnavailable where the driver cannot.
  virtual net::awaitable<Result<SnapshotPtr>> save_running() {
    co_return make_error(Errc::kUnavailable, "not_supported", "this sandbox cannot be saved");
  }
  // Saves the whole sandbox (its memory and state) to disk and ends its processes, freeing their
  // memory; resume() starts it again from there. It survives cabind's restart: handoff() says
  // where it lies. kUnavailable where the driver cannot.
  virtual net::awaitable<Result<void>> hibernate() {
    co_return make_error(Errc::kUnavailable, "not_supported", "this sandbox cannot hibernate");
  }
  // Hibernated: nothing of it runs, and resume() restores it.
  virtual bool hibernated() const { return false; }
  virtual net::awaitable<Result<void>> pause() = 0;
  virtual net::awaitable<Result<void>> resume() = 0;
  // Idempotent; kills everything of the sandbox and removes its files, cgroups and mounts.
  virtual net::awaitable<void> destroy() = 0;
  // Completes when the sandbox ended (its agent exited, or destroy() ran); says why.
  virtual net::awaitable<std::string> wait_exit() = 0;
  // The newest lines the sandbox printed (launcher, agent, guest console), oldest first, bounded.
  virtual std::vector<std::string> recent_output() const { return {}; }
  // For a sandbox that stopped making progress: what its machine is doing, in a few lines for
  // the log ("" where the driver cannot tell more than recent_output()).
  virtual net::awaitable<std::string> stall_report() { co_return std::string(); }
  // One line for logs and GET /v1/sessions/{id}: host pid, cgroup, and so on.
  virtual std::string describe() const = 0;
  // What a later cabind needs to adopt this sandbox (SandboxDriver::adopt): which process it is,
  // and how to reach it. Small; kept in the store while the session lives.
  virtual nlohmann::json handoff() const = 0;
  // Leaves the sandbox running when this object goes, for the next cabind to adopt: nothing is
  // killed or removed.
  virtual void release() = 0;
};
using SandboxPtr = std::unique_ptr<Sandbox>;

class SandboxDriver {
 public:
  virtual ~SandboxDriver() = default;
  virtual DriverInfo info() const = 0;
  // Starts the sandbox and cabin-agent in it; returns without waiting for the browser.
  virtual net::awaitable<Result<SandboxPtr>> create(const SandboxSpec& spec) = 0;
  // At start-up: the sandbox of a session an earlier cabind started, from what its handoff()
  // said. kNotFound when it is gone (the host rebooted, or it died while no cabind watched it).
  virtual net::awaitable<Result<SandboxPtr>> adopt(const std::string& session_id,
                                                   const nlohmann::json& handoff) = 0;
  // At start-up, after adopting: removes what sandboxes of an earlier cabind run left behind,
  // killing any sandbox not in `keep` (the adopted ones).
  virtual void reap_leftovers(const std::set<std::string>& keep) = 0;
  // Starts a copy of `snapshot` (one of this driver's) as the sandbox `spec` names. The copy
  // runs on from where the snapshot was taken: its programs, the agent's secret among them,
  // are the snapshot's until told otherwise. `spec` gives its id and what the driver itself
  // sets up; its resources and screen must be the snapshot's.
  virtual net::awaitable<Result<SandboxPtr>> restore(const Snapshot& snapshot,
                                                     const SandboxSpec& spec) {
    (void)snapshot;
    (void)spec;
    co_return make_error(Errc::kUnavailable, "not_supported", "this driver cannot restore");
  }
};

}  // namespace cabin::drivers
