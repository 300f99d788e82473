// Recorder: records the screen into MP4 files (agent_protocol::kRecordingsPath). Frames come from
// the capture the screenshots use, at the recording's rate, and go raw into an ffmpeg that
// encodes them with libx264 inside the sandbox, within its CPU and disk limits.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "common/agent_protocol.h"
#include "common/result.h"

namespace cabin::agent {

struct RecorderOptions {
  std::string ffmpeg = "/usr/bin/ffmpeg";
  // Non-empty: ffmpeg starts through this binary's exec filter helper (exec_filter.h).
  std::string filter_helper;
  std::string dir = "/tmp/.cabin-recordings";  // the files, named <id>.mp4
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

  struct Recording;

 private:
  net::any_io_executor ex_;
  RecorderOptions opts_;
  std::map<std::string, std::shared_ptr<Recording>> recordings_;
};

}  // namespace cabin::agent
