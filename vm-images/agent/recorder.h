// Recorder: records the screen into MP4 files (agent_protocol::kRecordingsPath). Frames come from
// the capture the screenshots use, at the recording's rate, and go raw into an ffmpeg that
// encodes them with libx264 inside the sandbox, within its CPU and disk limits.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <sys/stat.h>

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "common/agent_protocol.h"
#include "common/result.h"
#include "common/unique_fd.h"

namespace cabin::agent {

struct RecorderOptions {
  std::string ffmpeg = "/usr/bin/ffmpeg";
  // Non-empty: ffmpeg starts through this binary's exec filter helper (exec_filter.h).
  std::string filter_helper;
  // The files, named <id>.mp4: a dir of the agent's own (mode 0700, as its parent, which the
  // recorder makes too), not one every process of the sandbox may write to.
  std::string dir = "/home/cabin/.cabin-agent/recordings";
  // A stop (or the duration limit) waits for a frame ffmpeg has not taken yet until ffmpeg has
  // taken no bytes for this long, then abandons it: an encoder that stalls cannot hold a stop.
  std::chrono::milliseconds stall_grace{5000};
  // The same before its first frame: a guest busy starting its browser (under TCG above all) can
  // take seconds to load ffmpeg's libraries and open its encoder.
  std::chrono::milliseconds start_grace{20000};
  // Once its input ends, ffmpeg has this long to finish the file before it is killed.
  std::chrono::milliseconds finish_wait{20000};
};

class Recorder {
 public:
  Recorder(net::any_io_executor ex, RecorderOptions opts);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Starts recording `display`: kConflict when the id is taken or kMaxRecordings run.
  Result<agent_protocol::RecordingStatus> start(const std::string& display,
                                                const agent_protocol::RecordingRequest& req);
  // Stops it and answers once its file is complete (or ffmpeg was killed after finish_wait).
  net::awaitable<Result<agent_protocol::RecordingStatus>> stop(const std::string& id);
  Result<agent_protocol::RecordingStatus> status(const std::string& id) const;
  // Stops them all (the agent is going away).
  void stop_all();
  // For FileRoots: a file in the recorder's dir is given out only if it is a recording's file,
  // the very one the recorder created (its inode) with no other name (st_nlink 1). Files
  // elsewhere pass.
  Result<void> check_read(const std::string& path, const struct stat& st) const;

  struct Recording;

 private:
  // Makes the dir (and its parent) if missing, checks that both are the agent's alone, and
  // keeps the dir open.
  Result<void> open_dir();

  net::any_io_executor ex_;
  RecorderOptions opts_;
  UniqueFd dir_;
  std::map<std::string, std::shared_ptr<Recording>> recordings_;
};

}  // namespace cabin::agent
