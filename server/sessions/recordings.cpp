// SessionManager's screen recordings: started and stopped through the agent, which encodes them
// in the sandbox; once stopped (by a caller, by a limit, or by the session's end) the file is
// copied out into recordings_dir, where it stays until deleted.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fstream>
#include <limits>
#include <optional>

#include "common/clock.h"
#include "common/deadline.h"
#include "common/log.h"
#include "common/sealed_stream.h"
#include "common/spawn.h"
#include "common/unique_fd.h"
#include "server/api/errors.h"
#include "server/api/ids.h"
#include "server/sessions/session_manager.h"

namespace cabin::sessions {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const auto& recording_log() {
  static auto l = logger("sessions");
  return l;
}

// How often a live recording is asked whether it stopped on its own (a limit).
constexpr auto kRecordingStatusPoll = std::chrono::seconds(1);

Error no_recording() {
  return api::errors::recording_not_found();
}

// What the API shows of a record: not where the file was in the sandbox.
json without_sandbox_path(json r) {
  r.erase("sandbox_path");
  return r;
}

}  // namespace

uint64_t SessionManager::recordings_held(const std::string& owner) const {
  uint64_t bytes = 0;
  if (config_.recordings_dir.empty()) return 0;
  for (const auto& row : store_.list_of(owner, true, std::numeric_limits<int>::max())) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(config_.recordings_dir / row.id, ec)) {
      if (e.path().extension() == ".mp4") bytes += e.file_size(ec);
    }
    if (auto it = live_.find(row.id); it != live_.end()) {
      for (const auto& [rid, r] : it->second->recordings_)
        bytes += api::recording_cap_bytes(r.value("max_mb", api::kMaxRecordingMb));
    }
  }
  return bytes;
}

net::awaitable<Result<json>> SessionManager::start_recording(const std::string& id,
                                                             const RecordingSpec& spec,
                                                             const Tenant& tenant) {
  if (config_.recordings_dir.empty())
    co_return make_error(Errc::kUnavailable, "sandbox_unavailable", "recordings are off");
  auto found = live(id);
  if (!found) co_return found.error();
  SessionPtr s = *found;
  if (s->paused()) co_return api::errors::session_paused();
  if (tenant.max_recordings_bytes > 0) {
    const uint64_t held = recordings_held(s->record().owner);
    const uint64_t asked = api::recording_cap_bytes(spec.max_mb);
    if (held + asked > tenant.max_recordings_bytes)
      co_return api::errors::quota_recordings(tenant.max_recordings_bytes >> 20, held >> 20,
                                              static_cast<int64_t>(asked >> 20));
  }
  agent_protocol::RecordingRequest req;
  req.id = api::new_recording_id();
  req.fps = spec.fps;
  req.crf = 40 - spec.quality * 25 / 100;  // quality 100: crf 15, quality 1: crf 40
  req.max_seconds = spec.max_duration_s;
  req.max_bytes = static_cast<uint64_t>(spec.max_mb) << 20;
  auto st = co_await s->agent_.start_recording(req);
  if (!st) co_return st.error();
  json r = {{"id", req.id},
            {"session_id", id},
            {"status", "recording"},
            {"reason", nullptr},
            {"fps", spec.fps},
            {"quality", spec.quality},
            {"max_duration_s", spec.max_duration_s},
            {"max_mb", spec.max_mb},
            {"started_at", format_rfc3339(clock_.unix_seconds())},
            {"stopped_at", nullptr},
            {"duration_s", 0},
            {"frames", 0},
            {"bytes", 0},
            {"media_type", "video/mp4"},
            {"sandbox_path", st->path}};
  s->recordings_[req.id] = r;
  // A limit stops it in the sandbox; this notices and keeps the file.
  cabin::spawn(
      ex_,
      [](SessionManager* m, std::weak_ptr<Session> weak, std::string rid) -> net::awaitable<void> {
        net::steady_timer t(m->ex_);
        for (;;) {
          t.expires_after(kRecordingStatusPoll);
          boost::system::error_code ec;
          co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
          auto s = weak.lock();
          if (!s || s->ending_ || !s->recordings_.count(rid)) co_return;
          if (s->paused()) continue;
          auto now = co_await s->agent_.recording_status(rid);
          if (!now || now->state == "recording") continue;
          (void)co_await m->finish_recording(s, rid);
          co_return;
        }
      }(this, s, req.id),
      "session " + id + ": recording " + req.id);
  recording_log()->info("session {}: recording {} at {} fps", id, req.id, spec.fps);
  co_return without_sandbox_path(r);
}

net::awaitable<Result<json>> SessionManager::finish_recording(
    const SessionPtr& s, const std::string& rid,
    std::optional<std::chrono::steady_clock::time_point> until) {
  auto it = s->recordings_.find(rid);
  if (it == s->recordings_.end()) {
    if (auto kept = recording(s->id(), rid)) co_return *kept;
    co_return no_recording();
  }
  // One finishes it; another caller waits for that, which ends within its bound.
  if (it->second.value("status", "") == "stopping") {
    net::steady_timer t(ex_);
    while (s->recordings_.count(rid)) {
      t.expires_after(std::chrono::milliseconds(100));
      boost::system::error_code ec;
      co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
    if (auto kept = recording(s->id(), rid)) co_return *kept;
    co_return no_recording();
  }
  it->second["status"] = "stopping";
  json r = it->second;
  const std::string why = s->ending_ ? "session_ended" : "";
  const auto deadline =
      until.value_or(std::chrono::steady_clock::now() + config_.recording_copy_timeout);
  auto time_left = [&] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now()));
  };
  auto st = co_await s->agent_.stop_recording(
      rid, std::min<std::chrono::milliseconds>(std::chrono::seconds(60), time_left()));
  const fs::path dir = config_.recordings_dir / s->id();
  std::error_code fec;
  fs::create_directories(dir, fec);
  uint64_t copied = 0;
  std::string failure = st ? (st->state == "failed" ? st->reason : "") : st.error().message;
  if (st) {
    // The file, out of the sandbox while it still runs. The sandbox says how long it is: no more
    // than the recording's max_mb is taken, and every read has a deadline.
    const uint64_t cap = api::recording_cap_bytes(r.value("max_mb", api::kMaxRecordingMb));
    auto file = co_await s->agent_.read_file(st->path);
    const fs::path part = dir / (rid + ".mp4.part");
    const bool fits = file && *file->length <= cap;
    UniqueFd out(fits ? ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1);
    if (!file) {
      failure = "the file: " + file.error().message;
    } else if (!fits) {
      failure = "the sandbox's file is " + std::to_string(*file->length) +
                " bytes, more than max_mb allows (" + std::to_string(cap) + " with a margin)";
    } else if (!out.valid()) {
      failure = "the file: " + std::string(std::strerror(errno));
    } else {
      uint64_t left = *file->length;
      std::string chunk(256 * 1024, '\0');
      auto write_all = [&](const char* p, size_t n) {
        while (n > 0) {
          const ssize_t w = ::write(out.get(), p, n);
          if (w < 0 && errno == EINTR) continue;
          if (w < 0) return false;
          p += w;
          n -= static_cast<size_t>(w);
        }
        return true;
      };
      // Sealed as it comes, in whole pieces; the last (shorter, maybe empty) once all came.
      std::optional<StreamSealer> sealer;
      if (!config_.recordings_key.empty()) {
        sealer.emplace(config_.recordings_key, recording_context(s->id(), rid));
      }
      std::string pending;
      auto put = [&](const char* p, size_t n) {
        if (!sealer) return write_all(p, n);
        if (!sealer->ok()) return false;
        pending.append(p, n);
        size_t at = 0;
        for (; pending.size() - at >= kSealedPiece; at += kSealedPiece) {
          const std::string out =
              sealer->piece(std::string_view(pending).substr(at, kSealedPiece), false);
          if (!sealer->ok() || !write_all(out.data(), out.size())) return false;
        }
        pending.erase(0, at);
        return true;
      };
      auto finish = [&] {
        if (!sealer) return true;
        const std::string out = sealer->piece(pending, true);
        return sealer->ok() && write_all(out.data(), out.size());
      };
      bool ok = !sealer || write_all(sealer->head().data(), sealer->head().size());
      const size_t early = static_cast<size_t>(std::min<uint64_t>(file->buffer.size(), left));
      ok = ok && put(static_cast<const char*>(file->buffer.data().data()), early);
      left -= early;
      copied += early;
      boost::system::error_code ec;
      bool stalled = false;
      while (ok && left > 0) {
        Deadline stall(file->stream, std::min(config_.recording_stall, time_left()));
        const size_t n = co_await file->stream.async_read_some(
            net::buffer(chunk.data(), static_cast<size_t>(std::min<uint64_t>(chunk.size(), left))),
            net::redirect_error(net::use_awaitable, ec));
        stalled = stall.expired();
        if (ec) break;
        ok = put(chunk.data(), n);
        left -= n;
        copied += n;
      }
      if (stalled) {
        failure = "the sandbox stopped sending the file, " + std::to_string(left) +
                  " bytes short; given up";
      } else if (!ok || left > 0) {
        failure = "the file stopped " + std::to_string(left) + " bytes short";
      } else if (!finish()) {
        failure = "sealing the file failed";
      } else {
        fs::rename(part, dir / (rid + ".mp4"), fec);
        if (fec) failure = "the file: " + fec.message();
      }
    }
    if (!failure.empty()) fs::remove(part, fec);
  }
  r["status"] = failure.empty() ? "stopped" : "failed";
  r["reason"] = failure.empty() ? (why.empty() ? st->reason : why) : failure;
  r["stopped_at"] = format_rfc3339(clock_.unix_seconds());
  if (st) {
    r["duration_s"] = st->seconds;
    r["frames"] = st->frames;
  }
  r["bytes"] = copied;
  r.erase("sandbox_path");
  {
    std::ofstream meta(dir / (rid + ".json"), std::ios::trunc);
    meta << r.dump();
  }
  s->recordings_.erase(rid);
  recording_log()->info("session {}: recording {} {}: {} bytes ({})", s->id(), rid,
                        r["status"].get<std::string>(), copied, r["reason"].dump());
  co_return r;
}

net::awaitable<Result<json>> SessionManager::stop_recording(const std::string& id,
                                                            const std::string& rid) {
  if (SessionPtr s = find(id)) {
    if (s->recordings_.count(rid)) {
      if (s->paused()) co_return api::errors::session_paused();
      co_return co_await finish_recording(s, rid);
    }
  }
  if (auto kept = recording(id, rid)) co_return *kept;
  co_return no_recording();
}

Result<std::vector<json>> SessionManager::recordings(const std::string& id) const {
  std::vector<json> out;
  SessionPtr s = find(id);
  if (!s && !store_.get(id)) return api::errors::session_not_found();
  if (!config_.recordings_dir.empty()) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(config_.recordings_dir / id, ec)) {
      if (e.path().extension() != ".json") continue;
      std::ifstream in(e.path());
      auto j = json::parse(in, nullptr, false);
      if (j.is_object()) out.push_back(std::move(j));
    }
  }
  if (s) {
    for (const auto& [rid, r] : s->recordings_) out.push_back(without_sandbox_path(r));
  }
  std::sort(out.begin(), out.end(), [](const json& a, const json& b) {
    return a.value("started_at", "") < b.value("started_at", "") ||
           (a.value("started_at", "") == b.value("started_at", "") &&
            a.value("id", "") < b.value("id", ""));
  });
  return out;
}

std::optional<json> SessionManager::recording(const std::string& id, const std::string& rid) const {
  if (SessionPtr s = find(id)) {
    if (auto it = s->recordings_.find(rid); it != s->recordings_.end())
      return without_sandbox_path(it->second);
  }
  if (config_.recordings_dir.empty()) return std::nullopt;
  std::ifstream in(config_.recordings_dir / id / (rid + ".json"));
  if (!in) return std::nullopt;
  auto j = json::parse(in, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  return j;
}

std::string SessionManager::live_recording_path(const std::string& id,
                                                const std::string& rid) const {
  if (SessionPtr s = find(id)) {
    if (auto it = s->recordings_.find(rid); it != s->recordings_.end())
      return it->second.value("sandbox_path", "");
  }
  return {};
}

fs::path SessionManager::recording_file(const std::string& id, const std::string& rid) const {
  return config_.recordings_dir / id / (rid + ".mp4");
}

net::awaitable<Result<void>> SessionManager::delete_recording(const std::string& id,
                                                              const std::string& rid) {
  if (SessionPtr s = find(id); s && s->recordings_.count(rid)) {
    if (s->paused()) co_return api::errors::session_paused();
    (void)co_await finish_recording(s, rid);
  }
  if (!recording(id, rid)) co_return no_recording();
  std::error_code ec;
  fs::remove(recording_file(id, rid), ec);
  fs::remove(config_.recordings_dir / id / (rid + ".json"), ec);
  co_return Result<void>{};
}

}  // namespace cabin::sessions
