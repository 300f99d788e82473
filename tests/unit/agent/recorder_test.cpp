// The recorder against a real Xvfb and stand-ins for ffmpeg: one that takes no frames (a stop and
// the duration limit still end the recording, in bounded time), one slow to start (its first
// frame is kept) and one that fails (its reason reaches the record); and the file it gives out
// being the one it made.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "vm-images/agent/recorder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <optional>
#include <string>

#include "common/unique_fd.h"
#include "tests/unit/agent/test_util.h"
#include "tests/unit/vnc/xvfb_fixture.h"
#include "vm-images/agent/files.h"

using namespace cabin;
using namespace cabin::agent;
using cabin::agent::testing::run_sync;
using cabin::agent::testing::TempDir;
using cabin::agent::testing::write_script;
using namespace std::chrono_literals;
namespace net = boost::asio;

namespace {

// A recording of an Xvfb into a stand-in for ffmpeg; by default one that never reads its input,
// so the frame pipe fills and every write waits.
struct StalledRecording {
  StalledRecording(int width, int height, int64_t max_seconds,
                   const std::string& ffmpeg = "exec sleep 600\n",
                   std::chrono::milliseconds start_grace = 300ms)
      : x(width, height) {
    RecorderOptions o;
    o.ffmpeg = write_script(dir.path() + "/ffmpeg", ffmpeg);
    o.dir = dir.path() + "/recordings";
    o.stall_grace = 200ms;
    o.start_grace = start_grace;
    o.finish_wait = 500ms;
    recorder.emplace(io.get_executor(), o);
    agent_protocol::RecordingRequest r;
    r.id = "r1";
    r.fps = 30;
    r.max_seconds = max_seconds;
    REQUIRE(recorder->start(x.name(), r).ok());
  }

  // Runs until the recording has ended, and answers its record.
  agent_protocol::RecordingStatus ended(std::chrono::seconds within) {
    cabin::testing::run_until(
        io, [&] { return recorder->status("r1")->state != "recording"; }, within);
    auto s = recorder->status("r1");
    REQUIRE(s.ok());
    return *s;
  }

  vnc::testing::Xvfb x;
  TempDir dir;
  net::io_context io;
  std::optional<Recorder> recorder;
};

}  // namespace

TEST_CASE("a stop ends a recording whose encoder takes no frames", "[recorder]") {
  // A frame of 5 MiB cannot fit the 1 MiB pipe: the first write waits for good.
  StalledRecording r(1280, 1024, 3600);
  // Until nothing is ready to run: the recording has grabbed its first frame and waits on it.
  do r.io.restart();
  while (r.io.poll() > 0);
  CHECK(r.recorder->status("r1")->frames == 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto stopped = run_sync(r.io, r.recorder->stop("r1"), 10s);
  REQUIRE(stopped.ok());
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  // The encoder was killed: the file is not a finished one.
  CHECK(stopped->state == "failed");
}

TEST_CASE("the duration limit ends a recording whose encoder takes no frames", "[recorder]") {
  StalledRecording r(320, 240, 1);
  const auto s = r.ended(10s);
  // Cut at its limit, with an encoder that had to be killed.
  CHECK(s.state == "failed");
  CHECK(s.reason.find("ffmpeg") != std::string::npos);
}

TEST_CASE("an encoder slow to take its first frame still gets it", "[recorder]") {
  // Like ffmpeg loading its libraries in a guest busy starting its browser: it reads nothing for
  // 2 s, past the 1 s limit and the stall grace, then takes everything into the file.
  StalledRecording r(1280, 1024, 1, "sleep 2\nfor a; do out=$a; done\nexec cat > \"$out\"\n", 10s);
  const auto s = r.ended(15s);
  CHECK(s.state == "stopped");
  CHECK(s.reason == "max_duration");
  CHECK(s.frames >= 1);
  CHECK(s.bytes >= s.frames * 1280 * 1024 * 4);
}

TEST_CASE("a failing encoder's own last words are the recording's reason", "[recorder]") {
  StalledRecording r(320, 240, 3600,
                     "head -c 1000 > /dev/null\necho 'first' >&2\n"
                     "echo 'Invalid buffer size, packet size 1000' >&2\nexit 69\n");
  const auto s = r.ended(10s);
  CHECK(s.state == "failed");
  CHECK(s.reason == "ffmpeg exited with status 69: Invalid buffer size, packet size 1000");
}

TEST_CASE("the recorder gives out only the file it made, in a dir of its own", "[recorder]") {
  StalledRecording r(320, 240, 3600);
  const std::string dir = r.dir.path() + "/recordings";
  struct stat st {};
  REQUIRE(::lstat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  const std::string path = r.recorder->status("r1")->path;
  CHECK(path == dir + "/r1.mp4");
  const FileRoots files({r.dir.path()}, [&](const std::string& p, const struct stat& s) {
    return r.recorder->check_read(p, s);
  });
  CHECK(files.open_file(path).ok());
  auto refused = [&] {
    auto f = files.open_file(path);
    return !f.ok() && f.error().code == "path_not_allowed";
  };
  // A second name: whatever writes there writes the recording.
  const std::string other = r.dir.path() + "/other";
  REQUIRE(::link(path.c_str(), other.c_str()) == 0);
  CHECK(refused());
  REQUIRE(::unlink(other.c_str()) == 0);
  CHECK(files.open_file(path).ok());
  // Another file put in its place, a sparse one as large as it likes.
  {
    UniqueFd big(::open(other.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    REQUIRE(big.valid());
    REQUIRE(::ftruncate(big.get(), off_t{1} << 40) == 0);
  }
  REQUIRE(::rename(other.c_str(), path.c_str()) == 0);
  CHECK(refused());
  // Files elsewhere are not its business.
  {
    UniqueFd plain(::open(other.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    REQUIRE(plain.valid());
  }
  CHECK(files.open_file(other).ok());
  CHECK(run_sync(r.io, r.recorder->stop("r1"), 10s).ok());
}
