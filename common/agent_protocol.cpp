#include "common/agent_protocol.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>
#include <vector>

#include "common/bounded_json.h"
#include "common/json_fields.h"

namespace cabin::agent_protocol {

using nlohmann::json;

Result<ExecRequest> parse_exec_request(std::string_view body) {
  auto j = parse_object(body);
  if (!j) return j.error();
  if (auto r = reject_unknown(*j, {"argv", "timeout_ms", "max_output_bytes", "env", "cwd", "stdin"});
      !r) {
    return r.error();
  }
  ExecRequest req;
  auto argv = j->find("argv");
  if (argv == j->end()) return invalid_field("argv", "is required");
  if (!argv->is_array() || argv->empty()) return invalid_field("argv", "must be a non-empty array");
  if (argv->size() > kMaxArgs) return invalid_field("argv", "has too many arguments");
  for (size_t i = 0; i < argv->size(); ++i) {
    auto s = read_string((*argv)[i], "argv[" + std::to_string(i) + "]", kMaxArgBytes);
    if (!s) return s.error();
    if (s->find('\0') != std::string::npos) return invalid_field("argv", "contains a NUL byte");
    req.argv.push_back(std::move(*s));
  }
  if (req.argv[0].empty()) return invalid_field("argv[0]", "must not be empty");
  if (auto it = j->find("timeout_ms"); it != j->end()) {
    auto n = read_int(*it, "timeout_ms", 1, kMaxTimeoutMs);
    if (!n) return n.error();
    req.timeout_ms = *n;
  }
  if (auto it = j->find("max_output_bytes"); it != j->end()) {
    auto n = read_int(*it, "max_output_bytes", 0, kMaxOutputBytes);
    if (!n) return n.error();
    req.max_output_bytes = *n;
  }
  if (auto it = j->find("env"); it != j->end()) {
    if (!it->is_object()) return invalid_field("env", "must be an object of strings");
    if (it->size() > kMaxEnv) return invalid_field("env", "has too many entries");
    for (const auto& [k, v] : it->items()) {
      if (k.empty() || k.size() > 256 || k.find('=') != std::string::npos ||
          k.find('\0') != std::string::npos) {
        return invalid_field("env", "has an invalid name");
      }
      auto s = read_string(v, "env." + k, kMaxArgBytes);
      if (!s) return s.error();
      if (s->find('\0') != std::string::npos) return invalid_field("env." + k, "contains NUL");
      req.env[k] = std::move(*s);
    }
  }
  if (auto it = j->find("cwd"); it != j->end()) {
    auto s = read_string(*it, "cwd", 4096);
    if (!s) return s.error();
    if (s->empty() || s->find('\0') != std::string::npos) {
      return invalid_field("cwd", "must be a non-empty path");
    }
    req.cwd = std::move(*s);
  }
  if (auto it = j->find("stdin"); it != j->end()) {
    auto s = read_string(*it, "stdin", kMaxStdin);
    if (!s) return s.error();
    req.stdin_data = std::move(*s);
  }
  return req;
}

json to_json(const ExecRequest& r) {
  json j = {{"argv", r.argv}, {"timeout_ms", r.timeout_ms}, {"max_output_bytes", r.max_output_bytes}};
  if (!r.env.empty()) j["env"] = r.env;
  if (r.cwd) j["cwd"] = *r.cwd;
  if (!r.stdin_data.empty()) j["stdin"] = r.stdin_data;
  return j;
}

Result<NavigateRequest> parse_navigate_request(std::string_view body) {
  auto j = parse_object(body);
  if (!j) return j.error();
  if (auto r = reject_unknown(*j, {"url", "wait_until"}); !r) return r.error();
  NavigateRequest req;
  auto url = j->find("url");
  if (url == j->end()) return invalid_field("url", "is required");
  auto u = read_string(*url, "url", kMaxNavigateUrl);
  if (!u) return u.error();
  if (u->empty() || u->find_first_of(std::string_view("\0\r\n", 3)) != std::string::npos) {
    return invalid_field("url", "must be a non-empty URL on one line");
  }
  req.url = std::move(*u);
  if (auto it = j->find("wait_until"); it != j->end()) {
    auto w = read_string(*it, "wait_until", 16);
    if (!w) return w.error();
    if (*w != "commit" && *w != "load" && *w != "networkidle") {
      return invalid_field("wait_until", "must be commit, load or networkidle");
    }
    req.wait_until = std::move(*w);
  }
  return req;
}

Result<std::string> parse_clipboard(std::string_view body) {
  if (body.size() > kMaxClipboardBytes * 6 + 64) {
    return make_error(Errc::kTooLarge, "clipboard_too_large",
                      "clipboard text is limited to " + std::to_string(kMaxClipboardBytes) +
                          " bytes");
  }
  auto j = parse_object(body);
  if (!j) return j.error();
  if (auto r = reject_unknown(*j, {"text"}); !r) return r.error();
  auto text = j->find("text");
  if (text == j->end()) return invalid_field("text", "is required");
  if (!text->is_string()) return invalid_field("text", "must be a string");
  auto out = text->get<std::string>();
  if (out.size() > kMaxClipboardBytes) {
    return make_error(Errc::kTooLarge, "clipboard_too_large",
                      "clipboard text is limited to " + std::to_string(kMaxClipboardBytes) +
                          " bytes of UTF-8");
  }
  return out;
}

Result<BrowserEvent> parse_browser_event(std::string_view line) {
  if (line.size() > kMaxEventLine) return invalid_request("an event line is too long");
  auto j = parse_bounded(line, {.max_bytes = kMaxEventLine, .max_depth = 1, .max_values = 64});
  if (!j) return j.error();
  if (!j->is_object()) return invalid_request("an event must be an object");
  BrowserEvent ev;
  auto seq = j->find("seq");
  if (seq == j->end() || !seq->is_number_unsigned() || seq->get<uint64_t>() == 0)
    return invalid_field("seq", "must be a positive integer");
  ev.seq = seq->get<uint64_t>();
  auto type = j->find("type");
  if (type == j->end() || !type->is_string()) return invalid_field("type", "must be a string");
  const auto& name = type->get_ref<const std::string&>();
  if (std::find(std::begin(kBrowserEventTypes), std::end(kBrowserEventTypes), name) ==
      std::end(kBrowserEventTypes))
    return invalid_field("type", "is not an event the agent sends");
  ev.type = name;
  for (auto& [key, value] : j->items()) {
    if (key == "seq" || key == "type") continue;
    if (std::find(std::begin(kBrowserEventFields), std::end(kBrowserEventFields), key) ==
        std::end(kBrowserEventFields))
      return invalid_field(key, "is not a field of an event");
    if (value.is_string()) {
      if (value.get_ref<const std::string&>().size() > kMaxEventString)
        return invalid_field(key, "is too long");
    } else if (!value.is_number_unsigned()) {
      return invalid_field(key, "must be a string or a count");
    }
    ev.fields[key] = std::move(value);
  }
  return ev;
}

bool valid_recording_id(std::string_view id) {
  return !id.empty() && id.size() <= 64 &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
         });
}

Result<RecordingRequest> parse_recording_request(std::string_view body) {
  auto j = parse_object(body);
  if (!j) return j.error();
  if (auto r = reject_unknown(*j, {"id", "fps", "crf", "max_seconds", "max_bytes"}); !r)
    return r.error();
  RecordingRequest out;
  auto id = read_string(j->value("id", json()), "id", 64);
  if (!id) return id.error();
  if (!valid_recording_id(*id)) return invalid_field("id", "must be [a-z0-9_]{1,64}");
  out.id = std::move(*id);
  if (j->contains("fps")) {
    auto v = read_int((*j)["fps"], "fps", 1, kMaxRecordingFps);
    if (!v) return v.error();
    out.fps = static_cast<int>(*v);
  }
  if (j->contains("crf")) {
    auto v = read_int((*j)["crf"], "crf", 15, 40);
    if (!v) return v.error();
    out.crf = static_cast<int>(*v);
  }
  if (j->contains("max_seconds")) {
    auto v = read_int((*j)["max_seconds"], "max_seconds", 1, kMaxRecordingSeconds);
    if (!v) return v.error();
    out.max_seconds = *v;
  }
  if (j->contains("max_bytes")) {
    auto v = read_int((*j)["max_bytes"], "max_bytes", 1 << 16,
                      static_cast<int64_t>(kMaxRecordingBytes));
    if (!v) return v.error();
    out.max_bytes = static_cast<uint64_t>(*v);
  }
  return out;
}

json to_json(const RecordingRequest& r) {
  return {{"id", r.id},
          {"fps", r.fps},
          {"crf", r.crf},
          {"max_seconds", r.max_seconds},
          {"max_bytes", r.max_bytes}};
}

Result<RecordingStatus> parse_recording_status(std::string_view body) {
  auto j = parse_bounded(body, {.max_bytes = 4096, .max_depth = 1, .max_values = 32});
  if (!j) return j.error();
  if (!j->is_object()) return invalid_request("a recording's status must be an object");
  RecordingStatus s;
  auto str = [&](const char* k, size_t max) -> Result<std::string> {
    return read_string(j->value(k, json()), k, max);
  };
  CABIN_ASSIGN_OR_RETURN(s.id, str("id", 64));
  if (!valid_recording_id(s.id)) return invalid_field("id", "is not a recording's");
  CABIN_ASSIGN_OR_RETURN(s.state, str("state", 16));
  if (s.state != "recording" && s.state != "stopped" && s.state != "failed")
    return invalid_field("state", "is not a recording's");
  CABIN_ASSIGN_OR_RETURN(s.reason, str("reason", 256));
  CABIN_ASSIGN_OR_RETURN(s.path, str("path", kMaxFilePath));
  for (auto [k, out] : {std::pair{"frames", &s.frames}, std::pair{"bytes", &s.bytes}}) {
    auto v = j->find(k);
    if (v == j->end() || !v->is_number_unsigned()) return invalid_field(k, "must be a count");
    *out = v->get<uint64_t>();
  }
  auto secs = j->find("seconds");
  if (secs == j->end() || !secs->is_number() || secs->get<double>() < 0 ||
      secs->get<double>() > 1e7)
    return invalid_field("seconds", "must be a duration");
  s.seconds = secs->get<double>();
  return s;
}

json to_json(const RecordingStatus& s) {
  return {{"id", s.id},         {"state", s.state}, {"reason", s.reason}, {"frames", s.frames},
          {"bytes", s.bytes},   {"seconds", s.seconds}, {"path", s.path}};
}

Result<std::string> check_file_path(std::string_view path) {
  if (path.empty() || path.front() != '/') return invalid_field("path", "must be absolute");
  if (path.size() > kMaxFilePath)
    return invalid_field("path", "is longer than " + std::to_string(kMaxFilePath) + " bytes");
  if (path.find('\0') != std::string_view::npos) return invalid_field("path", "holds a NUL");
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  size_t at = 1;
  while (at <= path.size() && path.size() > 1) {
    size_t end = path.find('/', at);
    if (end == std::string_view::npos) end = path.size();
    const auto part = path.substr(at, end - at);
    if (part.empty() || part == "." || part == "..")
      return invalid_field("path", "must not hold empty, \".\" or \"..\" parts");
    at = end + 1;
  }
  return std::string(path);
}

Result<std::vector<FileEntry>> parse_dir_listing(std::string_view body) {
  auto j = parse_bounded(body, {.max_bytes = kMaxDirEntries * 1200, .max_depth = 3,
                                .max_values = kMaxDirEntries * 10 + 8});
  if (!j) return j.error();
  if (!j->is_object() || !j->contains("entries") || !(*j)["entries"].is_array())
    return invalid_request("a listing must be {\"entries\": [...]}");
  const auto& entries = (*j)["entries"];
  if (entries.size() > kMaxDirEntries) return invalid_request("a listing has too many entries");
  std::vector<FileEntry> out;
  out.reserve(entries.size());
  for (const auto& e : entries) {
    if (!e.is_object()) return invalid_request("an entry must be an object");
    FileEntry f;
    auto name = read_string(e.value("name", json()), "name", 1024);
    if (!name) return name.error();
    if (name->empty() || name->find('/') != std::string::npos || *name == "." || *name == "..")
      return invalid_field("name", "is not a file name");
    f.name = std::move(*name);
    f.type = e.value("type", "");
    if (f.type != "file" && f.type != "dir" && f.type != "other")
      return invalid_field("type", "must be file, dir or other");
    if (!e.contains("size") || !e["size"].is_number_unsigned())
      return invalid_field("size", "must be a count");
    f.size = e["size"].get<uint64_t>();
    auto mtime = read_int(e.value("mtime", json()), "mtime", 0, int64_t{1} << 40);
    if (!mtime) return mtime.error();
    f.mtime = *mtime;
    out.push_back(std::move(f));
  }
  return out;
}

namespace {

bool lower_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// A realtime clock before 2020 or after 2200 is not a host's.
constexpr int64_t kMinUnixNs = 1577836800LL * 1000000000LL;
constexpr int64_t kMaxUnixNs = 7258118400LL * 1000000000LL;

}  // namespace

Result<RestoredRequest> parse_restored_request(std::string_view body) {
  auto j = parse_object(body);
  if (!j) return j.error();
  if (auto r = reject_unknown(*j, {"secret", "unix_ns", "seed", "machine_id"}); !r) return r.error();
  RestoredRequest req;
  for (const char* name : {"secret", "unix_ns", "seed"}) {
    if (!j->contains(name)) return invalid_field(name, "is required");
  }
  auto secret = read_string(j->at("secret"), "secret", 128);
  if (!secret) return secret.error();
  if (secret->size() < 32 || !lower_hex(*secret))
    return invalid_field("secret", "must be 32 to 128 lowercase hex digits");
  req.secret = std::move(*secret);
  auto ns = read_int(j->at("unix_ns"), "unix_ns", kMinUnixNs, kMaxUnixNs);
  if (!ns) return ns.error();
  req.unix_ns = *ns;
  auto seed = read_string(j->at("seed"), "seed", 2 * kRestoreSeedBytes);
  if (!seed) return seed.error();
  if (seed->size() != 2 * kRestoreSeedBytes || !lower_hex(*seed))
    return invalid_field("seed", "must be " + std::to_string(kRestoreSeedBytes) + " bytes in hex");
  req.seed_hex = std::move(*seed);
  if (auto it = j->find("machine_id"); it != j->end()) {
    auto id = read_string(*it, "machine_id", 32);
    if (!id) return id.error();
    if (id->size() != 32 || !lower_hex(*id))
      return invalid_field("machine_id", "must be 32 lowercase hex digits");
    req.machine_id = std::move(*id);
  }
  return req;
}

json to_json(const RestoredRequest& r) {
  json j = {{"secret", r.secret}, {"unix_ns", r.unix_ns}, {"seed", r.seed_hex}};
  if (!r.machine_id.empty()) j["machine_id"] = r.machine_id;
  return j;
}

std::string format_restore_line(const RestoredRequest& r, int64_t monotonic_ns) {
  return std::to_string(r.unix_ns) + " " + std::to_string(monotonic_ns) + " " + r.seed_hex + " " +
         (r.machine_id.empty() ? std::string("-") : r.machine_id) + "\n";
}

Result<RestoreLine> parse_restore_line(std::string_view line) {
  const auto bad = [](const std::string& why) {
    return make_error(Errc::kInvalidArgument, "bad_restore_line", why);
  };
  if (line.size() > kMaxRestoreLine) return bad("too long");
  if (line.empty() || line.back() != '\n') return bad("not one whole line");
  line.remove_suffix(1);
  std::vector<std::string_view> parts;
  while (!line.empty() && parts.size() < 5) {
    const size_t sp = line.find(' ');
    parts.push_back(line.substr(0, sp));
    line = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
  }
  if (parts.size() != 4 || !line.empty()) return bad("expected four fields");
  const auto number = [](std::string_view s, int64_t min, int64_t max) -> std::optional<int64_t> {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < min || v > max)
      return std::nullopt;
    return v;
  };
  RestoreLine out;
  auto unix_ns = number(parts[0], kMinUnixNs, kMaxUnixNs);
  auto mono = number(parts[1], 0, std::numeric_limits<int64_t>::max());
  if (!unix_ns || !mono) return bad("bad clock fields");
  out.unix_ns = *unix_ns;
  out.monotonic_ns = *mono;
  if (parts[2].size() != 2 * kRestoreSeedBytes || !lower_hex(parts[2])) return bad("bad seed");
  for (size_t i = 0; i < parts[2].size(); i += 2) {
    const auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    out.seed.push_back(static_cast<char>(nibble(parts[2][i]) * 16 + nibble(parts[2][i + 1])));
  }
  if (parts[3] != "-") {
    if (parts[3].size() != 32 || !lower_hex(parts[3])) return bad("bad machine-id");
    out.machine_id = std::string(parts[3]);
  }
  return out;
}

Result<nlohmann::json> parse_browser_state(std::string_view body) {
  if (body.size() > kMaxStateBytes) {
    return make_error(Errc::kInvalidArgument, "limit_exceeded",
                      "a browser state is at most " + std::to_string(kMaxStateBytes >> 20) + " MiB");
  }
  auto parsed = parse_bounded(body, {kMaxStateBytes, kGuestJsonDepth, 1u << 20});
  if (!parsed || !parsed->is_object())
    return invalid_request("a browser state is a JSON object {cookies, urls}");
  auto& j = *parsed;
  if (auto r = reject_unknown(j, {"cookies", "urls"}); !r) return r.error();
  auto cookies = j.find("cookies");
  if (cookies == j.end() || !cookies->is_array()) return invalid_field("cookies", "must be an array");
  if (cookies->size() > kMaxStateCookies) {
    return invalid_field("cookies", "at most " + std::to_string(kMaxStateCookies));
  }
  for (const auto& c : *cookies) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string() || !c.contains("value") ||
        !c["value"].is_string()) {
      return invalid_field("cookies", "each is an object with a name and a value");
    }
  }
  auto urls = j.find("urls");
  if (urls == j.end() || !urls->is_array()) return invalid_field("urls", "must be an array");
  if (urls->size() > kMaxStatePages)
    return invalid_field("urls", "at most " + std::to_string(kMaxStatePages));
  for (const auto& u : *urls) {
    if (!u.is_string() || u.get_ref<const std::string&>().empty() ||
        u.get_ref<const std::string&>().size() > kMaxNavigateUrl ||
        u.get_ref<const std::string&>().find_first_of(std::string_view("\0\r\n", 3)) !=
            std::string::npos) {
      return invalid_field("urls", "each is a URL on one line, at most " +
                                       std::to_string(kMaxNavigateUrl) + " bytes");
    }
  }
  return std::move(j);
}

nlohmann::json to_json(const NavigateRequest& r) {
  return {{"url", r.url}, {"wait_until", r.wait_until}};
}

Result<ExecResult> parse_exec_result(std::string_view body, int64_t max_output_bytes) {
  auto bad = [](const std::string& why) {
    return make_error(Errc::kBadGateway, "agent_error", "exec answer from the agent: " + why);
  };
  // The caller bounded the body by what max_output_bytes can take (exec_answer_limit).
  auto parsed = parse_bounded(body, {body.size(), kGuestJsonDepth, 64});
  if (!parsed) return bad(parsed.error().message);
  const json& j = *parsed;
  if (!j.is_object()) return bad("not a JSON object");
  ExecResult r;
  auto get_bool = [&](const char* k, bool& out) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_boolean()) return false;
    out = it->get<bool>();
    return true;
  };
  auto get_text = [&](const char* k, std::string& out) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_string()) return false;
    out = it->get<std::string>();
    return static_cast<int64_t>(out.size()) <= max_output_bytes * 3 + 16;
  };
  auto optional_int = [&](const char* k, std::optional<int>& out) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) return true;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 255) {
      return false;
    }
    out = it->get<int>();
    return true;
  };
  auto dur = j.find("duration_ms");
  if (dur == j.end() || !dur->is_number_integer() || !optional_int("exit_code", r.exit_code) ||
      !optional_int("signal", r.signal)) {
    return bad("exit_code, signal or duration_ms missing or out of range");
  }
  r.duration_ms = dur->get<int64_t>();
  if (!get_bool("timed_out", r.timed_out) || !get_bool("stdout_truncated", r.stdout_truncated) ||
      !get_bool("stderr_truncated", r.stderr_truncated) || !get_text("stdout", r.stdout_data) ||
      !get_text("stderr", r.stderr_data)) {
    return bad("fields missing, mistyped or too large");
  }
  return r;
}

json to_json(const ExecResult& r) {
  return {{"exit_code", r.exit_code ? json(*r.exit_code) : json(nullptr)},
          {"signal", r.signal ? json(*r.signal) : json(nullptr)},
          {"timed_out", r.timed_out},
          {"stdout", r.stdout_data},
          {"stderr", r.stderr_data},
          {"stdout_truncated", r.stdout_truncated},
          {"stderr_truncated", r.stderr_truncated},
          {"duration_ms", r.duration_ms}};
}

}  // namespace cabin::agent_protocol
