#include "vm-images/agent/recorder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "common/child_process.h"
#include "common/log.h"
#include "common/notifier.h"
#include "common/spawn.h"
#include "common/unique_fd.h"
#include "vm-images/agent/exec_filter.h"
#include "vm-images/agent/process.h"
#include "vnc/capture.h"
#include "vnc/display.h"

namespace cabin::agent {
namespace {

using Clock = std::chrono::steady_clock;
namespace ap = agent_protocol;

auto log() { return cabin::logger("agent.recorder"); }

// The last line ffmpeg wrote to its log (why it failed), at most 200 bytes of it.
std::string last_log_line(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return "";
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return "";
  std::string tail(static_cast<size_t>(std::min<off_t>(st.st_size, 4096)), '\0');
  const ssize_t n = ::pread(fd.get(), tail.data(), tail.size(), st.st_size - tail.size());
  tail.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  if (const auto nl = tail.find_last_of('\n'); nl != std::string::npos) tail.erase(0, nl + 1);
  for (char& c : tail)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return tail.size() > 200 ? tail.substr(0, 200) : tail;
}

// `name` under `at` as a dir of ours alone: made with mode 0700 if missing, then opened without
// following a symlink and checked; one of ours with a wider mode is narrowed.
Result<UniqueFd> private_dir(int at, const std::string& name) {
  if (::mkdirat(at, name.c_str(), 0700) != 0 && errno != EEXIST)
    return make_error(Errc::kInternal, "recording_failed", name + ": " + std::strerror(errno));
  UniqueFd fd(::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid())
    return make_error(Errc::kInternal, "recording_failed", name + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || st.st_uid != ::geteuid())
    return make_error(Errc::kInternal, "recording_failed", name + " is not the agent's own");
  if ((st.st_mode & 077) != 0 && ::fchmod(fd.get(), 0700) != 0)
    return make_error(Errc::kInternal, "recording_failed", name + ": " + std::strerror(errno));
  return fd;
}

}  // namespace

struct Recorder::Recording {
  Recording(net::any_io_executor ex, vnc::Display d, vnc::Capturer c, const RecorderOptions& o)
      : opts(o),
        display(std::move(d)),
        capturer(std::move(c)),
        input(ex),
        timer(ex),
        limit(ex),
        stall(ex),
        done(ex) {}

  RecorderOptions opts;
  ap::RecordingRequest req;
  vnc::Display display;
  vnc::Capturer capturer;
  vnc::Image frame;
  std::unique_ptr<ChildProcess> ffmpeg;
  net::posix::stream_descriptor input;  // ffmpeg's stdin
  net::steady_timer timer;
  net::steady_timer limit;  // the duration limit, which holds while a frame write waits
  net::steady_timer stall;  // after a stop: a pending frame write is abandoned when it fires
  Notifier done;
  bool stopping = false;
  bool finished = false;
  ap::RecordingStatus status;
  std::string log_path;             // ffmpeg's stderr
  Clock::time_point last_progress;  // when ffmpeg's pipe last took bytes
  // The file as the recorder created it, before ffmpeg opened it by its name.
  UniqueFd file;
  dev_t dev = 0;
  ino_t ino = 0;

  uint64_t file_size() const {
    struct stat st {};
    return ::fstat(file.get(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  }

  void stop(std::string why) {
    if (stopping) return;
    stopping = true;
    status.reason = std::move(why);
    timer.cancel();
    limit.cancel();
    watch_stall();
  }

  // How long ffmpeg may take nothing before its pending frame is abandoned.
  std::chrono::milliseconds grace() const {
    return status.frames == 0 ? opts.start_grace : opts.stall_grace;
  }

  // Abandons the pending frame once ffmpeg has taken nothing for its grace; a slow encoder that
  // still takes bytes keeps its frame.
  void watch_stall() {
    stall.expires_at(last_progress + grace());
    stall.async_wait([this](boost::system::error_code e) {
      if (e || finished) return;
      if (Clock::now() - last_progress >= grace())
        input.cancel();
      else
        watch_stall();
    });
  }

  // One frame into ffmpeg's pipe, noting each time it takes some.
  net::awaitable<void> write_frame(boost::system::error_code& ec) {
    const auto* p = frame.pixels.data();
    size_t left = frame.pixels.size();
    while (left > 0 && !ec) {
      const size_t n = co_await input.async_write_some(net::buffer(p, left),
                                                       net::redirect_error(net::use_awaitable, ec));
      if (n > 0) last_progress = Clock::now();
      p += n;
      left -= n;
    }
  }

  net::awaitable<void> run() {
    const auto period = std::chrono::nanoseconds(1'000'000'000LL / req.fps);
    const auto start = Clock::now();
    last_progress = start;
    auto next = start;
    auto next_size_check = start;
    boost::system::error_code ec;
    std::string failure;
    bool screen_failed = false;  // then that is the reason, whatever ffmpeg did after
    limit.expires_at(start + std::chrono::seconds(req.max_seconds));
    limit.async_wait([this](boost::system::error_code e) {
      if (!e) stop("max_duration");
    });
    while (!stopping) {
      timer.expires_at(next);
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
      if (stopping) break;
      const auto now = Clock::now();
      const double elapsed = std::chrono::duration<double>(now - start).count();
      if (elapsed >= static_cast<double>(req.max_seconds)) {
        stop("max_duration");
        break;
      }
      if (now >= next_size_check) {
        next_size_check = now + std::chrono::seconds(1);
        if (file_size() >= req.max_bytes) {
          stop("max_size");
          break;
        }
      }
      if (auto r = capturer.grab(frame, std::nullopt, true); !r) {
        failure = "the screen: " + r.error().message;
        screen_failed = true;
        break;
      }
      // As many frames as the time asks for: a slow encoder repeats one rather than shortening
      // the video, so its length stays the time it recorded.
      const auto due = static_cast<uint64_t>(elapsed * req.fps) + 1;
      const uint64_t copies =
          std::min<uint64_t>(std::max<uint64_t>(due > status.frames ? due - status.frames : 1, 1),
                             static_cast<uint64_t>(req.fps));
      for (uint64_t i = 0; i < copies && !ec; ++i) co_await write_frame(ec);
      if (ec == net::error::operation_aborted && stopping) {
        log()->warn("recording {}: ffmpeg took nothing for {} ms; its last frame is cut", req.id,
                    grace().count());
        break;
      }
      if (ec) {
        failure = "ffmpeg stopped taking frames: " + ec.message();
        break;
      }
      status.frames += copies;
      status.seconds = static_cast<double>(status.frames) / req.fps;
      next = start + period * static_cast<int64_t>(status.frames);
    }
    limit.cancel();
    stall.cancel();
    // The end of its input makes ffmpeg finish the file.
    input.close(ec);
    net::steady_timer finish(timer.get_executor(), opts.finish_wait);
    finish.async_wait([this](boost::system::error_code e) {
      if (!e && ffmpeg && !ffmpeg->exited()) ffmpeg->kill_group(SIGKILL);
    });
    const int exit_status = co_await ffmpeg->wait();
    finish.cancel();
    status.bytes = file_size();
    // ffmpeg's own end says more than a broken pipe does.
    if (!(WIFEXITED(exit_status) && WEXITSTATUS(exit_status) == 0) && !screen_failed) {
      const std::string line = last_log_line(log_path);
      failure = "ffmpeg " + describe_wait_status(exit_status) + (line.empty() ? "" : ": " + line);
    }
    if (!failure.empty()) {
      status.state = "failed";
      status.reason = failure;
      log()->warn("recording {}: {}", req.id, failure);
    } else {
      status.state = "stopped";
      if (status.reason.empty()) status.reason = "stopped";
      log()->info("recording {}: {} frames, {} bytes ({})", req.id, status.frames, status.bytes,
                  status.reason);
    }
    finished = true;
    done.notify_all();
  }
};

Recorder::Recorder(net::any_io_executor ex, RecorderOptions opts)
    : ex_(std::move(ex)), opts_(std::move(opts)) {}

Recorder::~Recorder() = default;

Result<ap::RecordingStatus> Recorder::start(const std::string& display_name,
                                            const ap::RecordingRequest& req) {
  if (recordings_.count(req.id))
    return make_error(Errc::kConflict, "recording_exists", "a recording has that id");
  size_t running = 0;
  for (const auto& [id, r] : recordings_) running += !r->finished;
  if (running >= ap::kMaxRecordings)
    return make_error(Errc::kConflict, "too_many_recordings",
                      "at most " + std::to_string(ap::kMaxRecordings) + " recordings at once");
  if (display_name.empty())
    return make_error(Errc::kUnavailable, "display_not_ready", "the X display is not up yet");
  auto display = vnc::Display::open(display_name);
  if (!display) return display.error();
  auto capturer = vnc::Capturer::create(*display);
  if (!capturer) return capturer.error();
  const auto size = display->size();
  auto rec = std::make_shared<Recording>(ex_, std::move(*display), std::move(*capturer), opts_);
  rec->req = req;
  CABIN_TRY(open_dir());
  rec->status = {req.id, "recording", "", 0, 0, 0, opts_.dir + "/" + req.id + ".mp4"};
  // Created here, so that what is read back later can be checked to be this very file.
  const std::string leaf = req.id + ".mp4";
  (void)::unlinkat(dir_.get(), leaf.c_str(), 0);
  rec->file = UniqueFd(::openat(dir_.get(), leaf.c_str(),
                                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  struct stat made {};
  if (!rec->file.valid() || ::fstat(rec->file.get(), &made) != 0)
    return make_error(Errc::kInternal, "recording_failed",
                      rec->status.path + ": " + std::strerror(errno));
  rec->dev = made.st_dev;
  rec->ino = made.st_ino;

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    return make_error(Errc::kInternal, "recording_failed", std::strerror(errno));
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  (void)::fcntl(write_end.get(), F_SETPIPE_SZ, 1 << 20);
  rec->log_path = opts_.dir + "/" + req.id + ".log";
  UniqueFd log_file(::openat(dir_.get(), (req.id + ".log").c_str(),
                             O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  const std::string video_size = std::to_string(size.width) + "x" + std::to_string(size.height);
  SpawnOptions so;
  so.argv = {
      opts_.ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt",
      "bgr0", "-video_size", video_size, "-framerate", std::to_string(req.fps), "-i", "pipe:0",
      // yuv420p wants even sides; x264 veryfast keeps up at 30 fps on one core.
      "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-c:v", "libx264", "-preset", "veryfast", "-crf",
      std::to_string(req.crf), "-pix_fmt", "yuv420p", "-g", std::to_string(req.fps * 2),
      // Fragments: the file plays while it grows, and up to its last fragment if cut.
      "-movflags", "+frag_keyframe+empty_moov+default_base_moof", "-flush_packets", "1", "-f",
      "mp4", "-y", rec->status.path};
  if (!opts_.filter_helper.empty()) {
    auto path = find_program(opts_.ffmpeg);
    if (!path) return path.error();
    so.argv = filtered_exec_argv(opts_.filter_helper, std::nullopt, *path, so.argv);
  }
  so.env = {"PATH=/usr/bin:/bin", "HOME=/tmp"};
  so.stdin_fd = read_end.get();
  so.stderr_fd = log_file.valid() ? log_file.get() : -1;
  auto child = ChildProcess::spawn(ex_, so);
  if (!child) return child.error();
  rec->ffmpeg = std::move(*child);
  if (::fcntl(write_end.get(), F_SETFL, O_NONBLOCK) != 0)
    return make_error(Errc::kInternal, "recording_failed", std::strerror(errno));
  rec->input.assign(write_end.release());
  recordings_[req.id] = rec;
  cabin::spawn(ex_, rec->run(), "recording " + req.id);
  log()->info("recording {}: {} fps, crf {}, into {}", req.id, req.fps, req.crf, rec->status.path);
  return rec->status;
}

net::awaitable<Result<ap::RecordingStatus>> Recorder::stop(const std::string& id) {
  auto it = recordings_.find(id);
  if (it == recordings_.end())
    co_return make_error(Errc::kNotFound, "recording_not_found", "no recording has that id");
  auto rec = it->second;
  rec->stop("stopped");
  while (!rec->finished) co_await rec->done.wait_until(Notifier::Clock::time_point::max());
  co_return rec->status;
}

Result<ap::RecordingStatus> Recorder::status(const std::string& id) const {
  auto it = recordings_.find(id);
  if (it == recordings_.end())
    return make_error(Errc::kNotFound, "recording_not_found", "no recording has that id");
  ap::RecordingStatus s = it->second->status;
  if (!it->second->finished) s.bytes = it->second->file_size();
  return s;
}

Result<void> Recorder::open_dir() {
  if (dir_.valid()) return {};
  const auto slash = opts_.dir.rfind('/');
  if (opts_.dir.empty() || opts_.dir[0] != '/' || slash == 0 || slash + 1 == opts_.dir.size())
    return make_error(Errc::kInternal, "recording_failed", "no dir for recordings: " + opts_.dir);
  const std::string parent = opts_.dir.substr(0, slash);
  const auto up = parent.rfind('/');
  UniqueFd above(
      ::open(up == 0 ? "/" : parent.substr(0, up).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!above.valid())
    return make_error(Errc::kInternal, "recording_failed", parent + ": " + std::strerror(errno));
  CABIN_ASSIGN_OR_RETURN(UniqueFd own, private_dir(above.get(), parent.substr(up + 1)));
  CABIN_ASSIGN_OR_RETURN(dir_, private_dir(own.get(), opts_.dir.substr(slash + 1)));
  return {};
}

Result<void> Recorder::check_read(const std::string& path, const struct stat& st) const {
  if (path.size() <= opts_.dir.size() || path.compare(0, opts_.dir.size(), opts_.dir) != 0 ||
      path[opts_.dir.size()] != '/')
    return {};
  for (const auto& [id, r] : recordings_) {
    if (r->status.path != path) continue;
    if (st.st_dev == r->dev && st.st_ino == r->ino && st.st_nlink == 1) return {};
    break;
  }
  return make_error(Errc::kPermissionDenied, "path_not_allowed",
                    path + " is not a recording's file as the recorder made it");
}

void Recorder::stop_all() {
  for (auto& [id, r] : recordings_) r->stop("stopped");
}

}  // namespace cabin::agent
