// cabind's configuration: default run dirs, the private-dir check applied to them, and where the
// options come from.
#include "server/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/fakes/temp_dir.h"

namespace fs = std::filesystem;
using cabin::default_run_dir;
using cabin::ensure_private_dir;

namespace {

using cabin::testing::TempDir;

// cabind's options from this command line.
auto parse(std::vector<std::string> args) {
  args.insert(args.begin(), "cabind");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return cabin::parse_config(static_cast<int>(argv.size()), argv.data());
}

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("default run dirs: /run/cabin as root, never a fixed name in /tmp otherwise") {
  CHECK(default_run_dir(0, "/run/user/0", "/var/lib/cabin") == "/run/cabin");
  CHECK(default_run_dir(1000, "/run/user/1000", "/home/u/.cabin") == "/run/user/1000/cabin");
  CHECK(default_run_dir(1000, nullptr, "/home/u/.cabin") == "/home/u/.cabin/run");
  CHECK(default_run_dir(1000, "", "/home/u/.cabin") == "/home/u/.cabin/run");
  CHECK(default_run_dir(1000, "relative", "/home/u/.cabin") == "/home/u/.cabin/run");
}

TEST_CASE("ensure_private_dir creates 0700 dirs and refuses others' or open ones") {
  TempDir t;
  const fs::path fresh = t.path / "a" / "run";
  REQUIRE(ensure_private_dir(fresh).ok());
  CHECK(mode_of(fresh) == 0700);
  CHECK(ensure_private_dir(fresh).ok());  // again: it is ours

  const fs::path open_dir = t.path / "open";
  fs::create_directory(open_dir);
  REQUIRE(::chmod(open_dir.c_str(), 0755) == 0);
  auto open_r = ensure_private_dir(open_dir);
  REQUIRE_FALSE(open_r.ok());
  CHECK_THAT(open_r.error().message, Catch::Contains("mode 0755"));
  CHECK_THAT(open_r.error().message, Catch::Contains("0700"));

  // A symlink to a private dir, as another user could plant in /tmp, is refused.
  const fs::path link = t.path / "link";
  fs::create_directory_symlink(fresh, link);
  auto link_r = ensure_private_dir(link);
  REQUIRE_FALSE(link_r.ok());
  CHECK_THAT(link_r.error().message, Catch::Contains("symlink"));

  const fs::path file = t.path / "file";
  std::ofstream(file) << "x";
  CHECK_FALSE(ensure_private_dir(file).ok());

  if (::geteuid() == 0) {
    const fs::path theirs = t.path / "theirs";
    fs::create_directory(theirs);
    REQUIRE(::chmod(theirs.c_str(), 0700) == 0);
    REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
    auto theirs_r = ensure_private_dir(theirs);
    REQUIRE_FALSE(theirs_r.ok());
    CHECK_THAT(theirs_r.error().message, Catch::Contains("owned by uid 65534"));
  }
}

TEST_CASE("sandbox CPUs default to the host's less one, at least one") {
  const double cpus = cabin::default_sandbox_cpus();
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  CHECK(cpus >= 1);
  CHECK(cpus <= (online > 1 ? online - 1 : 1));
}

TEST_CASE("the metrics listener (--metrics-listen) is off by default, and comes from a flag, the environment or the config file") {
  ::unsetenv("CABIN_METRICS_LISTEN");
  auto none = parse({});
  REQUIRE_FALSE(none.exit);
  CHECK(none.config.metrics_host.empty());

  auto flag = parse({"--metrics-listen", "10.1.2.3:9464"});
  REQUIRE_FALSE(flag.exit);
  CHECK(flag.config.metrics_host == "10.1.2.3");
  CHECK(flag.config.metrics_port == 9464);

  ::setenv("CABIN_METRICS_LISTEN", "[::1]:9100", 1);
  auto env = parse({});
  ::unsetenv("CABIN_METRICS_LISTEN");
  REQUIRE_FALSE(env.exit);
  CHECK(env.config.metrics_host == "::1");
  CHECK(env.config.metrics_port == 9100);

  TempDir t;
  const fs::path file = t.path / "cabind.toml";
  std::ofstream(file) << "metrics-listen = \"127.0.0.1:0\"\n";
  auto from_file = parse({"--config", file.string()});
  REQUIRE_FALSE(from_file.exit);
  CHECK(from_file.config.metrics_host == "127.0.0.1");
  CHECK(from_file.config.metrics_port == 0);

  auto bad = parse({"--metrics-listen", "9464"});
  CHECK(bad.exit);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.message, Catch::Contains("--metrics-listen"));
}

TEST_CASE("the cgroup root is the host's by default, and an absolute path when given") {
  ::unsetenv("CABIN_CGROUP_ROOT");
  auto none = parse({});
  REQUIRE_FALSE(none.exit);
  CHECK(none.config.cgroup_root == "/sys/fs/cgroup");
  auto given = parse({"--cgroup-root", "/host/sys/fs/cgroup"});
  REQUIRE_FALSE(given.exit);
  CHECK(given.config.cgroup_root == "/host/sys/fs/cgroup");
  auto relative = parse({"--cgroup-root", "host/cgroup"});
  CHECK(relative.exit);
  CHECK(relative.exit_code == 2);
  CHECK_THAT(relative.message, Catch::Contains("--cgroup-root"));
}

TEST_CASE(
    "resource caps default to the host's memory and CPUs, and disk bounds come from anywhere") {
  for (const char* v :
       {"CABIN_MAX_SANDBOX_MEMORY_MB", "CABIN_RETENTION_HOURS", "CABIN_STATE_MIN_FREE_MB"})
    ::unsetenv(v);
  auto d = parse({});
  REQUIRE_FALSE(d.exit);
  CHECK(d.config.max_sandbox_memory_mb ==
        std::max(cabin::host_memory_mb(), d.config.sandbox_memory_mb));
  CHECK(d.config.max_sandbox_vcpus == std::min(cabin::host_cpus(), 16));
  CHECK(d.config.sessions_memory_percent == 100);
  CHECK(d.config.retention_hours == 168);
  CHECK(d.config.state_min_free_mb == 1024);
  CHECK(d.config.recording_copy_timeout_s == 300);

  auto flags = parse({"--max-sandbox-memory-mb", "4096", "--max-sandbox-vcpus", "2",
                      "--sessions-memory-percent", "150", "--retention-max-mb", "0"});
  REQUIRE_FALSE(flags.exit);
  CHECK(flags.config.max_sandbox_memory_mb == 4096);
  CHECK(flags.config.max_sandbox_vcpus == 2);
  CHECK(flags.config.sessions_memory_percent == 150);
  CHECK(flags.config.retention_max_mb == 0);

  ::setenv("CABIN_RETENTION_HOURS", "24", 1);
  auto env = parse({});
  ::unsetenv("CABIN_RETENTION_HOURS");
  REQUIRE_FALSE(env.exit);
  CHECK(env.config.retention_hours == 24);

  TempDir t;
  const fs::path file = t.path / "cabind.toml";
  std::ofstream(file) << "state-min-free-mb = 10\nrecording-copy-timeout-s = 5\n";
  auto from_file = parse({"--config", file.string()});
  REQUIRE_FALSE(from_file.exit);
  CHECK(from_file.config.state_min_free_mb == 10);
  CHECK(from_file.config.recording_copy_timeout_s == 5);

  // A default above the cap is a mistake to fix, not to guess at.
  auto above = parse({"--sandbox-memory-mb", "4096", "--max-sandbox-memory-mb", "2048"});
  CHECK(above.exit);
  CHECK(above.exit_code == 2);
  CHECK_THAT(above.message, Catch::Contains("--max-sandbox-memory-mb"));
}
