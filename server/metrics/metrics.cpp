#include "server/metrics/metrics.h"

#include <array>
#include <cassert>
#include <cmath>
#include <cstdio>

namespace cabin::metrics {
namespace {

std::string sample_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string label_text(const std::vector<std::string>& names, const LabelValues& values,
                       std::string_view extra_name = {}, std::string_view extra_value = {}) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (out.empty() ? "" : ",") + names[i] + "=\"" + escape_label_value(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    out += (out.empty() ? "" : ",") + std::string(extra_name) + "=\"" + std::string(extra_value) +
           "\"";
  }
  return out.empty() ? "" : "{" + out + "}";
}

const char* type_name(Type t) {
  switch (t) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// Create to ready takes a second to minutes (a microVM under TCG); pause and resume take
// milliseconds.
const std::vector<double> kStartBuckets = {0.25, 0.5, 1, 2, 5, 10, 20, 40, 60, 120};
const std::vector<double> kPauseBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                           0.1,   0.25,   0.5,   1,    2.5};

// A queued create waits from nothing to --create-queue-timeout-s (30 s by default).
const std::vector<double> kQueueBuckets = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                           5,    10,   20,  30,   60,  120};

void declare_cabind(Registry& r) {
  r.declare("cabin_sessions", Type::kGauge, "Live sessions by state and driver.",
            {"state", "driver"});
  r.declare("cabin_session_creates_total", Type::kCounter,
            "Session creates by driver and outcome (ready, refused, failed).",
            {"driver", "outcome"});
  r.declare("cabin_session_ends_total", Type::kCounter, "Sessions that ended, by reason.",
            {"reason"});
  r.declare("cabin_session_create_seconds", Type::kHistogram,
            "From a create's arrival until its session was ready.", {"driver"}, kStartBuckets);
  r.declare("cabin_session_pause_seconds", Type::kHistogram, "How long a pause took.", {"driver"},
            kPauseBuckets);
  r.declare("cabin_session_resume_seconds", Type::kHistogram, "How long a resume took.", {"driver"},
            kPauseBuckets);
  r.declare("cabin_session_hibernate_seconds", Type::kHistogram,
            "How long saving a session to disk took.", {"driver"}, kStartBuckets);
  r.declare("cabin_session_wake_seconds", Type::kHistogram,
            "How long starting a hibernated session again took.", {"driver"}, kStartBuckets);
  r.declare("cabin_session_adopt_seconds", Type::kHistogram,
            "How long taking over a session an earlier cabind left running took.", {"driver"},
            kPauseBuckets);
  r.declare("cabin_create_refusals_total", Type::kCounter,
            "Creates refused before a sandbox started, by reason (quota_sessions, quota_memory, "
            "quota_vcpus, rate_creates, capacity, capacity_memory, state_disk_full, queue_full, "
            "queue_timeout, client_gone, draining).",
            {"reason"});
  r.declare("cabin_create_queue_waiting", Type::kGauge, "Creates waiting for room now.", {});
  r.declare("cabin_create_queue_wait_seconds", Type::kHistogram,
            "How long creates waited for room, by outcome (admitted, queue_timeout, client_gone, "
            "draining).",
            {"outcome"}, kQueueBuckets);
  r.declare("cabin_pool_sandboxes", Type::kGauge,
            "Warm pools' sandboxes, by pool (DRIVER:WIDTHxHEIGHT) and state (ready, starting).",
            {"pool", "state"});
  r.declare("cabin_pool_claims_total", Type::kCounter,
            "Creates a warm pool serves, by pool and outcome (claimed; empty: it had none ready).",
            {"pool", "outcome"});
  r.declare("cabin_api_keys", Type::kGauge, "Tenant API keys that work.", {});
  r.declare("cabin_connections", Type::kGauge,
            "Open client connections into sessions, by kind (cdp, vnc, frames, preview).",
            {"kind"});
  r.declare("cabin_token_refusals_total", Type::kCounter,
            "Requests refused for their credentials, by error code.", {"reason"});
  r.declare("cabin_api_errors_total", Type::kCounter,
            "Error answers by code (agent_error: the sandbox's agent failed or answered wrongly).",
            {"code"});
  r.declare("cabin_egress_decisions_total", Type::kCounter,
            "Egress proxy decisions by kind (connect, http) and decision (allow, deny).",
            {"kind", "decision"});
  r.declare("cabin_egress_bytes_total", Type::kCounter,
            "Bytes through the egress proxy, by direction (up: from sandboxes).", {"direction"});
  r.declare("cabin_relayed_bytes_total", Type::kCounter,
            "Bytes relayed between clients and sandboxes, by kind (cdp, vnc, frames, preview) and "
            "direction (up: from clients).",
            {"kind", "direction"});
}

constexpr std::array<std::pair<Relay, const char*>, 4> kRelayKinds = {{
    {Relay::kCdp, "cdp"},
    {Relay::kVnc, "vnc"},
    {Relay::kFrames, "frames"},
    {Relay::kPreview, "preview"},
}};

// Up and down per kind; never destroyed, since pump threads may count until the process exits.
std::array<ShardedCount, 2 * kRelayKinds.size()>& relay_cells() {
  static auto* cells = new std::array<ShardedCount, 2 * kRelayKinds.size()>;
  return *cells;
}

void fill_relayed(Registry& r) {
  std::vector<std::pair<LabelValues, double>> values;
  for (const auto& [kind, name] : kRelayKinds) {
    const RelayCounts c = relay_counts(kind);
    values.push_back({{name, "up"}, static_cast<double>(c.up->total())});
    values.push_back({{name, "down"}, static_cast<double>(c.down->total())});
  }
  r.replace("cabin_relayed_bytes_total", std::move(values));
}

}  // namespace

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string end_reason_label(std::string_view reason) {
  for (std::string_view known : {"deleted", "timeout", "idle"}) {
    if (reason == known) return std::string(known);
  }
  if (reason == "server shutdown") return "shutdown";
  if (reason.rfind("sandbox exited", 0) == 0) return "sandbox_exited";
  if (reason.rfind("sandbox lost", 0) == 0) return "sandbox_lost";
  return "other";
}

void Registry::declare(std::string name, Type type, std::string help,
                       std::vector<std::string> labels, std::vector<double> buckets) {
  std::lock_guard lock(mutex_);
  Family& f = families_[std::move(name)];
  f.type = type;
  f.help = std::move(help);
  f.labels = std::move(labels);
  f.buckets = std::move(buckets);
}

Registry::Family* Registry::find(std::string_view name, size_t label_count) {
  auto it = families_.find(name);
  if (it == families_.end() || it->second.labels.size() != label_count) {
    assert(!"undeclared metric or wrong labels");
    return nullptr;
  }
  return &it->second;
}

void Registry::inc(std::string_view name, const LabelValues& labels, double by) {
  std::lock_guard lock(mutex_);
  if (Family* f = find(name, labels.size())) f->values[labels] += by;
}

void Registry::replace(std::string_view name, std::vector<std::pair<LabelValues, double>> values) {
  std::lock_guard lock(mutex_);
  auto it = families_.find(name);
  if (it == families_.end()) return;
  it->second.values.clear();
  for (auto& [labels, v] : values) {
    if (labels.size() == it->second.labels.size()) it->second.values[std::move(labels)] = v;
  }
}

void Registry::observe(std::string_view name, const LabelValues& labels, double value) {
  std::lock_guard lock(mutex_);
  Family* f = find(name, labels.size());
  if (!f) return;
  Histogram& h = f->histograms[labels];
  if (h.counts.empty()) h.counts.assign(f->buckets.size(), 0);
  for (size_t i = 0; i < f->buckets.size(); ++i) {
    if (value <= f->buckets[i]) {
      ++h.counts[i];
      break;
    }
  }
  h.sum += value;
  ++h.count;
}

void Registry::on_scrape(std::function<void(Registry&)> fill) {
  std::lock_guard lock(mutex_);
  fills_.push_back(std::move(fill));
}

std::string Registry::exposition() {
  std::vector<std::function<void(Registry&)>> fills;
  {
    std::lock_guard lock(mutex_);
    fills = fills_;
  }
  for (auto& fill : fills) fill(*this);
  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " + type_name(f.type) + "\n";
    if (f.type != Type::kHistogram) {
      for (const auto& [labels, v] : f.values) {
        out += name + label_text(f.labels, labels) + " " + sample_value(v) + "\n";
      }
      continue;
    }
    for (const auto& [labels, h] : f.histograms) {
      uint64_t cumulative = 0;
      for (size_t i = 0; i < f.buckets.size(); ++i) {
        cumulative += h.counts[i];
        out += name + "_bucket" + label_text(f.labels, labels, "le", sample_value(f.buckets[i])) + " " +
               std::to_string(cumulative) + "\n";
      }
      out += name + "_bucket" + label_text(f.labels, labels, "le", "+Inf") + " " +
             std::to_string(h.count) + "\n";
      out += name + "_sum" + label_text(f.labels, labels) + " " + sample_value(h.sum) + "\n";
      out += name + "_count" + label_text(f.labels, labels) + " " + std::to_string(h.count) + "\n";
    }
  }
  return out;
}

Registry& registry() {
  static Registry* r = [] {
    auto* made = new Registry;  // never destroyed: threads may count until the process exits
    declare_cabind(*made);
    made->on_scrape(fill_relayed);
    return made;
  }();
  return *r;
}

RelayCounts relay_counts(Relay kind) {
  auto& cells = relay_cells();
  const size_t i = 2 * static_cast<size_t>(kind);
  return {&cells[i], &cells[i + 1]};
}

GaugeHold::GaugeHold(std::string name, LabelValues labels)
    : name_(std::move(name)), labels_(std::move(labels)) {
  registry().inc(name_, labels_, 1);
}

GaugeHold::~GaugeHold() {
  if (!name_.empty()) registry().inc(name_, labels_, -1);
}

}  // namespace cabin::metrics
