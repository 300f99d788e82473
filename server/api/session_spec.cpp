#include "server/api/session_spec.h"

#include <algorithm>

#include "common/agent_protocol.h"
#include "common/json_fields.h"
#include "server/api/ids.h"

namespace cabin::api {

bool allowed_start_url(std::string_view url) {
  bool scheme_ok = false;
  for (std::string_view scheme : {"http://", "https://", "about:", "data:"}) {
    scheme_ok = scheme_ok || url.substr(0, scheme.size()) == scheme;
  }
  if (!scheme_ok) return false;
  // A data: URL's payload may hold spaces, as Chromium takes `data:text/html,<p style="a: b">`
  // as it is; a space in any other URL is a mistake. Control bytes never pass: they would break
  // the guest's line-based config and the logs.
  const bool data = url.substr(0, 5) == "data:";
  for (char c : url) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || (c == ' ' && !data)) return false;
  }
  return true;
}

std::string_view wait_until_name(WaitUntil w) {
  switch (w) {
    case WaitUntil::kCommit:
      return "commit";
    case WaitUntil::kLoad:
      return "load";
    case WaitUntil::kNetworkIdle:
      return "networkidle";
  }
  return "load";
}

std::string_view on_idle_name(OnIdle o) { return o == OnIdle::kPause ? "pause" : "delete"; }

Result<RecordingSpec> parse_recording_spec(const nlohmann::json& j, std::string_view prefix) {
  RecordingSpec spec;
  const std::string p(prefix);
  if (auto r = reject_unknown(j, {"fps", "quality", "max_duration_s", "max_mb"}, p); !r)
    return r.error();
  auto field = [&](const char* k, int64_t lo, int64_t hi, int64_t& out) -> Result<void> {
    auto it = j.find(k);
    if (it == j.end()) return {};
    auto v = read_int(*it, p + k, lo, hi);
    if (!v) return v.error();
    out = *v;
    return {};
  };
  int64_t fps = spec.fps, quality = spec.quality;
  CABIN_TRY(field("fps", 1, agent_protocol::kMaxRecordingFps, fps));
  CABIN_TRY(field("quality", 1, 100, quality));
  CABIN_TRY(field("max_duration_s", 1, agent_protocol::kMaxRecordingSeconds, spec.max_duration_s));
  CABIN_TRY(field("max_mb", 1, kMaxRecordingMb, spec.max_mb));
  spec.fps = static_cast<int>(fps);
  spec.quality = static_cast<int>(quality);
  return spec;
}

Result<SessionSpec> parse_session_spec(std::string_view body, const SpecLimits& limits) {
  SessionSpec spec;
  spec.timeout_s = limits.default_timeout_s;
  spec.idle_timeout_s = std::min(limits.default_idle_timeout_s, spec.timeout_s);
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return spec;
  auto j = parse_object(body);
  if (!j) return j.error();
  if (auto r =
          reject_unknown(*j, {"driver", "resolution", "display", "resources", "timeout_s",
                              "idle_timeout_s", "on_idle", "wait_until", "start_url", "network",
                              "profile", "record"});
      !r) {
    return r.error();
  }
  if (auto it = j->find("driver"); it != j->end()) {
    auto s = read_string(*it, "driver", 32);
    if (!s) return s.error();
    spec.driver = *s;
  }
  if (auto it = j->find("resolution"); it != j->end()) {
    if (!it->is_object()) return invalid_field("resolution", "must be an object {width, height}");
    if (auto r = reject_unknown(*it, {"width", "height"}, "resolution."); !r) return r.error();
    for (auto [name, out] : {std::pair{"width", &spec.resolution.width},
                             std::pair{"height", &spec.resolution.height}}) {
      auto f = it->find(name);
      if (f == it->end()) return invalid_field(std::string("resolution.") + name, "is required");
      auto n = read_int(*f, std::string("resolution.") + name, kMinDimension, kMaxDimension);
      if (!n) return n.error();
      *out = static_cast<int>(*n);
    }
    if (int64_t{spec.resolution.width} * spec.resolution.height > agent_protocol::kMaxImagePixels) {
      return invalid_field("resolution",
                           "at most " + std::to_string(agent_protocol::kMaxImagePixels) +
                               " pixels (7680x4320 fits), so that a screenshot of the whole "
                               "screen can be taken");
    }
  }
  if (auto it = j->find("display"); it != j->end()) {
    if (!it->is_object()) return invalid_field("display", "must be an object {width, height}");
    if (auto r = reject_unknown(*it, {"width", "height"}, "display."); !r) return r.error();
    Resolution d;
    for (auto [name, out] : {std::pair{"width", &d.width}, std::pair{"height", &d.height}}) {
      auto f = it->find(name);
      if (f == it->end()) return invalid_field(std::string("display.") + name, "is required");
      auto n = read_int(*f, std::string("display.") + name, 1, kMaxDimension);
      if (!n) return n.error();
      *out = static_cast<int>(*n);
    }
    if (d.width > spec.resolution.width || d.height > spec.resolution.height) {
      return invalid_field("display", "must not be larger than the resolution");
    }
    spec.display = d;
  }
  if (auto it = j->find("resources"); it != j->end()) {
    if (!it->is_object()) return invalid_field("resources", "must be an object {vcpus, memory_mb}");
    if (auto r = reject_unknown(*it, {"vcpus", "memory_mb"}, "resources."); !r) return r.error();
    if (auto f = it->find("vcpus"); f != it->end()) {
      auto n = read_int(*f, "resources.vcpus", 1, kMaxVcpus);
      if (!n) return n.error();
      if (*n > limits.max_vcpus) {
        return invalid_field("resources.vcpus",
                             "is more than this server gives one sandbox: at most " +
                                 std::to_string(limits.max_vcpus) + " (--max-sandbox-vcpus)");
      }
      spec.resources.vcpus = static_cast<int>(*n);
    }
    if (auto f = it->find("memory_mb"); f != it->end()) {
      auto n = read_int(*f, "resources.memory_mb", kMinMemoryMb, kMaxMemoryMb);
      if (!n) return n.error();
      if (*n > limits.max_memory_mb) {
        return invalid_field("resources.memory_mb",
                             "is more than this server gives one sandbox: at most " +
                                 std::to_string(limits.max_memory_mb) +
                                 " (--max-sandbox-memory-mb)");
      }
      spec.resources.memory_mb = static_cast<uint64_t>(*n);
    }
  }
  if (auto it = j->find("timeout_s"); it != j->end()) {
    auto n = read_int(*it, "timeout_s", 1, limits.max_timeout_s);
    if (!n) return n.error();
    spec.timeout_s = *n;
  }
  spec.idle_timeout_s = std::min(limits.default_idle_timeout_s, spec.timeout_s);
  if (auto it = j->find("idle_timeout_s"); it != j->end()) {
    auto n = read_int(*it, "idle_timeout_s", 0, spec.timeout_s);
    if (!n) return n.error();
    spec.idle_timeout_s = *n;
  }
  if (auto it = j->find("on_idle"); it != j->end()) {
    auto s = read_string(*it, "on_idle", 16);
    if (!s) return s.error();
    if (*s == "delete") {
      spec.on_idle = OnIdle::kDelete;
    } else if (*s == "pause") {
      spec.on_idle = OnIdle::kPause;
    } else {
      return invalid_field("on_idle", "must be \"delete\" or \"pause\"");
    }
  }
  if (auto it = j->find("wait_until"); it != j->end()) {
    auto s = read_string(*it, "wait_until", 16);
    if (!s) return s.error();
    bool known = false;
    for (auto w : {WaitUntil::kCommit, WaitUntil::kLoad, WaitUntil::kNetworkIdle}) {
      if (*s == wait_until_name(w)) {
        spec.wait_until = w;
        known = true;
      }
    }
    if (!known)
      return invalid_field("wait_until", "must be \"commit\", \"load\" or \"networkidle\"");
  }
  if (auto it = j->find("start_url"); it != j->end()) {
    auto s = read_string(*it, "start_url", kMaxStartUrl);
    if (!s) return s.error();
    if (!allowed_start_url(*s)) {
      return invalid_field("start_url", "must be an http, https, about: or data: URL");
    }
    spec.start_url = *s;
  }
  if (auto it = j->find("network"); it != j->end()) {
    auto p = egress::parse_policy(*it, "network");
    if (!p) return p.error();
    spec.network = std::move(*p);
  }
  if (auto it = j->find("profile"); it != j->end()) {
    if (!it->is_object()) return invalid_field("profile", "must be an object {id, persist}");
    if (auto r = reject_unknown(*it, {"id", "persist"}, "profile."); !r) return r.error();
    auto f = it->find("id");
    if (f == it->end()) return invalid_field("profile.id", "is required");
    auto id = read_string(*f, "profile.id", 64);
    if (!id) return id.error();
    if (!valid_profile_id(*id)) return invalid_field("profile.id", "is not a profile id");
    ProfileUse use{*id, false};
    if (auto p = it->find("persist"); p != it->end()) {
      if (!p->is_boolean()) return invalid_field("profile.persist", "must be true or false");
      use.persist = p->get<bool>();
    }
    spec.profile = std::move(use);
  }
  if (auto it = j->find("record"); it != j->end()) {
    if (!it->is_object()) {
      return invalid_field("record", "must be an object {fps, quality, max_duration_s, max_mb}");
    }
    auto r = parse_recording_spec(*it, "record.");
    if (!r) return r.error();
    spec.record = *r;
  }
  return spec;
}

}  // namespace cabin::api
