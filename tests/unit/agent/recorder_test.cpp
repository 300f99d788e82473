// The recorder against a real Xvfb and an encoder that takes no frames: a stop and the duration
// limit still end the recording, in bounded time.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "vm-images/agent/recorder.h"

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <string>

#include "tests/unit/agent/test_util.h"
#include "tests/unit/vnc/xvfb_fixture.h"

using namespace cabin;
using namespace cabin::agent;
using cabin::agent::testing::run_sync;
using cabin::agent::testing::TempDir;
using cabin::agent::testing::write_script;
using namespace std::chrono_literals;
namespace net = boost::asio;

namespace {

// An "ffmpeg" that never reads its input: the frame pipe fills and every write waits.
RecorderOptions stalled_encoder(const TempDir& dir) {
  RecorderOptions o;
  o.ffmpeg = write_script(dir.path() + "/ffmpeg", "exec sleep 600\n");
  o.dir = dir.path() + "/recordings";
  o.stall_grace = 200ms;
  o.finish_wait = 500ms;
  return o;
}

agent_protocol::RecordingRequest request(int64_t max_seconds) {
  agent_protocol::RecordingRequest r;
  r.id = "r1";
  r.fps = 30;
  r.max_seconds = max_seconds;
  return r;
}

}  // namespace

TEST_CASE("a stop ends a recording whose encoder takes no frames", "[recorder]") {
  // A frame of 5 MiB cannot fit the 1 MiB pipe: the first write waits for good.
  vnc::testing::Xvfb x(1280, 1024);
  TempDir dir;
  net::io_context io;
  Recorder recorder(io.get_executor(), stalled_encoder(dir));
  REQUIRE(recorder.start(x.name(), request(3600)).ok());
  // Until nothing is ready to run: the recording has grabbed its first frame and waits on it.
  do io.restart();
  while (io.poll() > 0);
  CHECK(recorder.status("r1")->frames == 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto stopped = run_sync(io, recorder.stop("r1"), 10s);
  REQUIRE(stopped.ok());
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  // The encoder was killed: the file is not a finished one.
  CHECK(stopped->state == "failed");
}

TEST_CASE("the duration limit ends a recording whose encoder takes no frames", "[recorder]") {
  vnc::testing::Xvfb x(320, 240);
  TempDir dir;
  net::io_context io;
  Recorder recorder(io.get_executor(), stalled_encoder(dir));
  REQUIRE(recorder.start(x.name(), request(1)).ok());
  cabin::testing::run_until(
      io, [&] { return recorder.status("r1")->state != "recording"; }, 10s);
  auto s = recorder.status("r1");
  REQUIRE(s.ok());
  // Cut at its limit, with an encoder that had to be killed.
  CHECK(s->state == "failed");
  CHECK(s->reason.find("ffmpeg") != std::string::npos);
}
