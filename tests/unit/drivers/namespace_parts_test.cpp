// Unit tests for the namespace driver's pure parts: launcher argv, id maps, cgroup limits, mount
// table, seccomp policy and exit reasons.
#include <seccomp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "server/drivers/namespace/cgroups.h"
#include "server/drivers/namespace/launcher_args.h"
#include "server/drivers/namespace/mounts.h"
#include "server/drivers/namespace/namespace_driver.h"
#include "server/drivers/namespace/sandbox_init.h"
#include "server/drivers/namespace/seccomp_policy.h"
#include "server/drivers/namespace/userns.h"

using namespace cabin;
using namespace cabin::nsbox;

namespace {
bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
}  // namespace

TEST_CASE("launcher argv round-trips through the parser") {
  LauncherArgs a;
  a.id = "s_1";
  a.agent_fd = 3;
  a.agent = "/opt/bin/cabin-agent";
  a.chromium_policy = "/opt/bin/chromium-policy.json";
  a.profile = "/var/lib/cabin/profiles/live/s_1";
  a.map_root = HostIds{600000, 600001};
  a.map_user = HostIds{601000, 601001};
  a.map_exec_uid = 601002;
  a.cgroup_procs = {"/sys/fs/cgroup/memory/cabin/s_1/cgroup.procs",
                    "/sys/fs/cgroup/pids/cabin/s_1/cgroup.procs"};
  a.cgroup_ns = "/proc/1/ns/cgroup";
  a.tmpfs_bytes = 64 << 20;
  a.payload = {"/opt/cabin/bin/cabin-agent", "--listen", "fd:3", "--x"};
  auto argv = build_launcher_argv("/usr/bin/cabin-sandbox", a);
  REQUIRE(argv[0] == "/usr/bin/cabin-sandbox");
  auto back = parse_launcher_args(argv);
  REQUIRE(back.ok());
  CHECK(back->id == a.id);
  CHECK(back->agent_fd == 3);
  CHECK(back->agent == a.agent);
  CHECK(back->chromium_policy == a.chromium_policy);
  CHECK(back->profile == a.profile);
  CHECK(back->map_root->uid == 600000);
  CHECK(back->map_root->gid == 600001);
  CHECK(back->map_user->uid == 601000);
  CHECK(back->map_exec_uid == 601002u);
  CHECK(back->cgroup_procs == a.cgroup_procs);
  CHECK(back->cgroup_ns == a.cgroup_ns);
  CHECK(back->tmpfs_bytes == a.tmpfs_bytes);
  CHECK(back->payload == a.payload);  // flags after "--" belong to the payload
  CHECK_FALSE(back->probe);
}

TEST_CASE("launcher argv parser rejects bad input") {
  auto parse = [](std::vector<std::string> v) {
    v.insert(v.begin(), "cabin-sandbox");
    return parse_launcher_args(v);
  };
  CHECK_FALSE(parse({"--id", "s", "--agent-fd", "3"}).ok());                        // no payload
  CHECK_FALSE(parse({"--id", "../x", "--agent-fd", "3", "--", "/bin/true"}).ok());  // bad id
  CHECK_FALSE(parse({"--id", "s", "--agent-fd", "2", "--", "/bin/true"}).ok());     // stdio
  CHECK_FALSE(parse({"--id", "s", "--agent-fd", "x", "--", "/bin/true"}).ok());
  CHECK_FALSE(parse({"--id", "s", "--", "/bin/true"}).ok());  // a payload needs its socket
  CHECK_FALSE(parse({"--id", "s", "--agent", "rel", "--agent-fd", "3", "--", "/x"}).ok());
  CHECK_FALSE(parse({"--id", "s", "--cgroup-ns", "ns", "--agent-fd", "3", "--", "/x"}).ok());
  CHECK_FALSE(parse({"--id", "s", "--profile", "rel", "--agent-fd", "3", "--", "/x"}).ok());
  CHECK_FALSE(parse({"--id", "s", "--agent-fd", "3", "--bogus", "1", "--", "/x"}).ok());
  CHECK_FALSE(parse({"--id", "s", "--agent-fd", "3", "--map-root", "0:0", "--map-user",
                     "601000:601000", "--map-exec-uid", "601001", "--", "/x"})
                  .ok());  // host root is never a target
  const std::vector<std::string> maps = {"--map-root", "600000:600000", "--map-user",
                                         "601000:601000"};
  auto with_maps = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = {"--id", "s", "--agent-fd", "3"};
    v.insert(v.end(), maps.begin(), maps.end());
    v.insert(v.end(), extra.begin(), extra.end());
    v.insert(v.end(), {"--", "/x"});
    return parse(v);
  };
  CHECK(with_maps({"--map-exec-uid", "601001"}).ok());
  CHECK_FALSE(with_maps({}).ok());  // as root, commands always get a uid of their own
  CHECK_FALSE(with_maps({"--map-exec-uid", "601000"}).ok());  // the agent's
  CHECK_FALSE(with_maps({"--map-exec-uid", "600000"}).ok());  // the sandbox root's
  CHECK_FALSE(with_maps({"--map-exec-uid", "0"}).ok());
  CHECK_FALSE(parse({"--id", "s", "--agent-fd", "3", "--map-exec-uid", "601001", "--", "/x"}).ok());
  CHECK_FALSE(parse({"--id", "s", "--agent-fd", "3", "--map-root", "5:5", "--", "/x"}).ok());
  CHECK_FALSE(parse({"--id", "s", "--agent-fd", "3", "--tmpfs-size", "12k", "--", "/x"}).ok());
  CHECK_FALSE(parse({"--id"}).ok());
  CHECK(parse({"--id", "probe", "--probe"}).ok());
}

TEST_CASE("id maps: root maps unprivileged ids, exec'd commands' too, and others map themselves") {
  auto root = plan_id_maps(true, 0, 0, HostIds{600000, 600000}, HostIds{601000, 601001}, 601002);
  CHECK(id_map_text(root.uid) == "0 600000 1\n1000 601000 1\n1001 601002 1\n");
  // Commands keep the sandbox's group, which shared files belong to: no gid of their own.
  CHECK(id_map_text(root.gid) == "0 600000 1\n1000 601001 1\n");
  CHECK(root.exec_uid_mapped);
  CHECK_FALSE(root.deny_setgroups);
  CHECK(root.setup_uid == 0);
  CHECK(kSandboxExecUid == 1001);

  // Only one line is allowed without root: commands stay the agent's uid.
  auto user = plan_id_maps(false, 1234, 777, std::nullopt, std::nullopt, std::nullopt);
  CHECK(id_map_text(user.uid) == "1000 1234 1\n");
  CHECK(id_map_text(user.gid) == "1000 777 1\n");
  CHECK_FALSE(user.exec_uid_mapped);
  CHECK(user.deny_setgroups);
  CHECK(user.setup_uid == kSandboxUid);
}

TEST_CASE("supplementary groups beyond the primary one are named") {
  CHECK(groups_beyond(1000, {1000}).empty());
  CHECK(groups_beyond(1000, {}).empty());
  CHECK(groups_beyond(1000, {1000, 42, 4, 42}) == std::vector<uint32_t>{42, 4});
  CHECK(kept_groups_problem({}).empty());
  CHECK_THAT(kept_groups_problem({42, 4}), Catch::Contains("supplementary groups 42, 4"));
}

TEST_CASE(
    "the freezer is v2's cgroup.freeze or v1's freezer controller, and says when it is done") {
  const auto root = fs::temp_directory_path() / ("cabin-freezer-" + std::to_string(::getpid()));
  fs::remove_all(root);
  const auto mem = root / "memory" / "cabin" / "s1";
  const auto v1 = root / "freezer" / "cabin" / "s1";
  const auto v2 = root / "unified" / "cabin" / "s1";
  for (const auto& d : {mem, v1, v2}) fs::create_directories(d);
  auto put = [](const fs::path& f, const std::string& text) { std::ofstream(f) << text; };
  // What was written last, at the start (cgroup files are written in place, not truncated).
  auto get = [](const fs::path& f) {
    std::ifstream in(f);
    std::string line;
    std::getline(in, line);
    return line;
  };
  CHECK(freezer_dir({mem}).empty());
  put(v1 / "freezer.state", "THAWED");
  CHECK(freezer_dir({mem, v1}) == v1);
  REQUIRE(request_freeze(v1, true));
  CHECK(get(v1 / "freezer.state") == "FROZEN");
  put(v1 / "freezer.state", "FREEZING\n");  // the kernel, while tasks are still stopping
  CHECK_FALSE(freeze_settled(v1, true));
  put(v1 / "freezer.state", "FROZEN\n");
  CHECK(freeze_settled(v1, true));
  CHECK_FALSE(freeze_settled(v1, false));

  put(v2 / "cgroup.freeze", "0");
  put(v2 / "cgroup.events", "populated 1\nfrozen 0\n");
  CHECK(freezer_dir({v2}) == v2);
  REQUIRE(request_freeze(v2, true));
  CHECK(get(v2 / "cgroup.freeze") == "1");
  CHECK_FALSE(freeze_settled(v2, true));
  put(v2 / "cgroup.events", "populated 1\nfrozen 1\n");
  CHECK(freeze_settled(v2, true));
  REQUIRE(request_freeze(v2, false));
  CHECK(get(v2 / "cgroup.freeze") == "0");
  fs::remove_all(root);
}

TEST_CASE("cgroup limit files for v1 and v2") {
  CgroupLimits l;
  l.memory_bytes = 256ull << 20;
  l.pids_max = 64;
  l.cpu_quota_us = 150000;
  auto v1 = cgroup_limit_writes(CgroupLayout::kV1, "/cg", "cabin", "s1", l);
  REQUIRE(v1.size() == 5);
  CHECK(v1[0].file == "/cg/memory/cabin/s1/memory.limit_in_bytes");
  CHECK(v1[0].value == "268435456");
  CHECK(v1[0].required);
  CHECK(v1[1].file == "/cg/memory/cabin/s1/memory.memsw.limit_in_bytes");
  CHECK_FALSE(v1[1].required);
  CHECK(v1[2].file == "/cg/pids/cabin/s1/pids.max");
  CHECK(v1[2].value == "64");
  CHECK(v1[3].file == "/cg/cpu/cabin/s1/cpu.cfs_period_us");
  CHECK(v1[4].value == "150000");

  auto v2 = cgroup_limit_writes(CgroupLayout::kV2, "/cg", "cabin", "s1", l);
  REQUIRE(v2.size() == 4);
  CHECK(v2[0].file == "/cg/cabin/s1/memory.max");
  CHECK(v2[0].value == "268435456");
  CHECK(v2[1].file == "/cg/cabin/s1/memory.swap.max");
  CHECK(v2[2].file == "/cg/cabin/s1/pids.max");
  CHECK(v2[3].value == "150000 100000");

  CHECK(cgroup_limit_writes(CgroupLayout::kNone, "/cg", "cabin", "s1", l).empty());

  // All sandboxes together weigh less than a default sibling cgroup.
  auto p2 = cgroup_parent_writes(CgroupLayout::kV2, "/cg", "cabin");
  REQUIRE(p2.size() == 1);
  CHECK(p2[0].file == "/cg/cabin/cpu.weight");
  CHECK(p2[0].value == "50");
  auto p1 = cgroup_parent_writes(CgroupLayout::kV1, "/cg", "cabin");
  REQUIRE(p1.size() == 1);
  CHECK(p1[0].file == "/cg/cpu/cabin/cpu.shares");
  CHECK(p1[0].value == "512");
  CHECK(cgroup_limit_writes(CgroupLayout::kV2, "/cg", "cabin", "s1", CgroupLimits{}).empty());
}

TEST_CASE("seccomp denylist is sane") {
  const auto& rules = seccomp_denylist();
  REQUIRE(rules.size() > 20);
  std::set<std::string> plain;
  for (const auto& r : rules) {
    INFO(r.name);
    CHECK(std::string(r.why).size() > 5);  // every entry says why
    CHECK(r.err > 0);
    CHECK(seccomp_syscall_resolve_name(r.name) != __NR_SCMP_ERROR);
    if (r.arg_index < 0) CHECK(plain.insert(r.name).second);  // no duplicates
  }
  for (const char* must :
       {"kexec_load", "init_module", "bpf", "perf_event_open", "keyctl", "userfaultfd",
        "open_by_handle_at", "mount", "umount2", "pivot_root", "move_mount", "fsopen", "swapon",
        "reboot", "ptrace", "syslog", "process_vm_writev", "process_vm_readv", "pidfd_getfd"})
    CHECK(plain.count(must) == 1);
  // Chromium's own sandbox needs these.
  for (const char* allowed : {"clone", "clone3", "unshare", "chroot", "seccomp", "prctl"})
    CHECK(plain.count(allowed) == 0);
  // vsock is not scoped by the net namespace.
  CHECK(std::any_of(rules.begin(), rules.end(), [](const SyscallRule& r) {
    return std::string(r.name) == "socket" && r.arg_index == 0 && r.arg_value == AF_VSOCK &&
           r.err == EAFNOSUPPORT;
  }));
}

TEST_CASE("mount table: a saved profile is Chromium's user data dir, bound over the home") {
  MountPlan plan;
  const auto without = sandbox_mounts(plan);
  CHECK(std::none_of(without.begin(), without.end(),
                     [](const MountEntry& e) { return e.target == kSandboxProfilePath; }));
  plan.profile_source = "/proc/self/fd/8";
  const auto table = sandbox_mounts(plan);
  auto at = [&](const std::string& t) {
    return std::find_if(table.begin(), table.end(), [&](auto& e) { return e.target == t; });
  };
  const auto home = at(kSandboxHome), profile = at(kSandboxProfilePath);
  REQUIRE(profile != table.end());
  CHECK(profile > home);  // over the home tmpfs, not under it
  CHECK(profile->kind == MountKind::kBindRw);
  CHECK(profile->source == "/proc/self/fd/8");
  CHECK((profile->flags & MS_NOEXEC) != 0);
  CHECK((profile->flags & MS_NOSUID) != 0);
  CHECK((profile->flags & MS_NODEV) != 0);
}

TEST_CASE("mount table: read-only system dirs, private writable dirs, each with a reason") {
  MountPlan plan;
  plan.agent_source = "/proc/self/fd/6";
  plan.chromium_policy_source = "/proc/self/fd/7";
  auto table = sandbox_mounts(plan);
  std::set<std::string> targets;
  size_t dev_ro_at = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const auto& e = table[i];
    INFO(e.target);
    CHECK(e.target.rfind('/', 0) == 0);
    CHECK(std::string(e.why).size() > 3);
    if (e.kind == MountKind::kRemountRo && e.target == "/dev") dev_ro_at = i;
    if (e.target.rfind("/dev/", 0) == 0 && e.kind != MountKind::kRemountRo)
      CHECK((dev_ro_at == 0));  // /dev is made read-only only after it is filled
    targets.insert(e.target);
  }
  CHECK(dev_ro_at > 0);
  auto find = [&](const std::string& t) {
    return *std::find_if(table.begin(), table.end(), [&](auto& e) { return e.target == t; });
  };
  CHECK(find("/usr").kind == MountKind::kBindRo);
  // /etc is a tmpfs holding a few host entries, never the whole host /etc.
  CHECK(find("/etc").kind == MountKind::kTmpfs);
  CHECK(find("/etc/fonts").kind == MountKind::kHostEntry);
  CHECK(find("/etc/ld.so.cache").kind == MountKind::kHostEntry);
  for (const char* hidden : {"/etc/shadow", "/etc/gshadow", "/etc/ssl/private", "/etc/ssl"})
    CHECK(targets.count(hidden) == 0);
  // The host's own Chromium policies stay hidden; the sandbox gets cabind's, before /etc is
  // made read-only.
  CHECK(targets.count("/etc/chromium") == 0);
  CHECK(find("/etc/chromium/master_preferences").kind == MountKind::kHostEntry);
  size_t policy_at = 0, etc_ro_at = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].target == kSandboxChromiumPolicyPath) policy_at = i;
    if (table[i].kind == MountKind::kRemountRo && table[i].target == "/etc") etc_ro_at = i;
  }
  CHECK(table[policy_at].kind == MountKind::kBindFileRo);
  CHECK(table[policy_at].source == "/proc/self/fd/7");
  CHECK((policy_at > 0 && policy_at < etc_ro_at));
  for (const auto& e : table) {
    if (e.target.rfind("/etc/", 0) == 0 && e.target != kSandboxChromiumPolicyPath)
      CHECK(e.source == e.target);
  }
  CHECK(find("/proc").kind == MountKind::kProc);
  // A process sees only those it may ptrace: exec'd commands not the browser's.
  CHECK(find("/proc").data == "hidepid=invisible");
  CHECK(find(kSandboxHome).data.find("mode=0770") != std::string::npos);
  CHECK(find("/tmp").kind == MountKind::kTmpfs);
  CHECK(find("/dev/shm").kind == MountKind::kTmpfs);
  CHECK(find(kSandboxHome).data.find("uid=1000") != std::string::npos);
  // Nothing of the host is writable inside: the agent's socket comes as a descriptor.
  CHECK(std::none_of(table.begin(), table.end(), [](auto& e) { return e.kind == MountKind::kBindRw; }));
  CHECK(find(kSandboxAgentPath).kind == MountKind::kBindFileRo);
  CHECK(targets.count("/dev/null") == 1);
}

TEST_CASE("mountinfo escapes are decoded") {
  CHECK(unescape_mountinfo("/a\\040b") == "/a b");
  CHECK(unescape_mountinfo("/tab\\011x\\134") == "/tab\tx\\");
  CHECK(unescape_mountinfo("/plain") == "/plain");
}

TEST_CASE("payload environment carries nothing but the basics and the secret") {
  auto env = payload_environment("s3cret");
  CHECK(contains(env, "HOME=/home/cabin"));
  CHECK(contains(env, "LANG=C.UTF-8"));
  CHECK(contains(env, "CABIN_AGENT_SECRET=s3cret"));
  CHECK(env.size() == 6);
  CHECK(payload_environment(nullptr).size() == 5);
  auto with_ca = payload_environment("s3cret", "-----BEGIN CERTIFICATE-----\n");
  CHECK(contains(with_ca, "CABIN_TRUSTED_CA=-----BEGIN CERTIFICATE-----\n"));
  CHECK(with_ca.size() == 7);
  CHECK(payload_environment("s3cret", "").size() == 6);
}

TEST_CASE("driver builds the launcher argv for the agent") {
  drivers::NamespaceDriverConfig c;
  c.run_dir = "/run/cabin";
  c.agent_path = "/usr/lib/cabin/cabin-agent";
  c.launcher_path = "/usr/lib/cabin/cabin-sandbox";
  drivers::SandboxSpec spec;
  spec.session_id = "abc_1";
  spec.width = 1024;
  spec.height = 768;
  spec.start_url = "https://example.com/";
  spec.memory_bytes = 1ull << 30;
  auto argv = drivers::namespace_launcher_argv(c, spec, true, {"/cg/cgroup.procs"});
  auto parsed = parse_launcher_args(argv);
  REQUIRE(parsed.ok());
  CHECK(argv[0] == "/usr/lib/cabin/cabin-sandbox");
  CHECK(parsed->agent_fd == 3);
  CHECK(parsed->agent == "/usr/lib/cabin/cabin-agent");
  CHECK(parsed->map_root->uid == 600000);
  CHECK(parsed->map_user->uid == 601000);
  CHECK(parsed->map_exec_uid == 601001u);
  CHECK(parsed->tmpfs_bytes == 512ull << 20);
  CHECK(parsed->payload ==
        std::vector<std::string>{"/opt/cabin/bin/cabin-agent", "--listen", "fd:3", "--width",
                                 "1024", "--height", "768", "--chromium-sandbox", "on", "--home",
                                 "/home/cabin", "--exec-filter", "on", "--exec-uid", "1001",
                                 "--start-url", "https://example.com/"});
  // The secret travels in the environment, never on the command line.
  for (const auto& a : argv) CHECK(a.find("secret") == std::string::npos);

  auto unprivileged = parse_launcher_args(drivers::namespace_launcher_argv(c, spec, false, {}));
  REQUIRE(unprivileged.ok());
  CHECK_FALSE(unprivileged->map_root.has_value());
  CHECK_FALSE(unprivileged->map_exec_uid.has_value());
  CHECK(unprivileged->cgroup_procs.empty());
  // One uid to map: commands run as the agent's, still under the exec filter.
  CHECK(std::find(unprivileged->payload.begin(), unprivileged->payload.end(), "--exec-uid") ==
        unprivileged->payload.end());

  c.payload_override = {"/bin/sh", "-c", "true"};
  auto test_argv = parse_launcher_args(drivers::namespace_launcher_argv(c, spec, true, {}));
  REQUIRE(test_argv.ok());
  CHECK(test_argv->agent.empty());
  CHECK(test_argv->payload == c.payload_override);
}

TEST_CASE("exit reasons") {
  using drivers::namespace_exit_reason;
  CHECK(namespace_exit_reason(CLD_EXITED, 1, "") == "agent exited with status 1");
  CHECK(namespace_exit_reason(CLD_EXITED, 1, "cabin-agent failed: chromium killed by signal 9 (Killed)") ==
        "chromium killed by signal 9 (Killed)");
  CHECK(namespace_exit_reason(CLD_EXITED, 1, "cabin-agent failed: ") == "agent exited with status 1");
  CHECK(namespace_exit_reason(CLD_KILLED, 9, "") == "killed by signal 9 (SIGKILL)");
  CHECK(namespace_exit_reason(CLD_KILLED, 9, "cabin-agent failed: cabin-agent killed by signal 9 (Killed)") ==
        "cabin-agent killed by signal 9 (Killed)");
  CHECK(namespace_exit_reason(CLD_EXITED, kSetupFailedStatus, "cabin-sandbox[x]: mounts: EPERM") ==
        "sandbox setup failed: cabin-sandbox[x]: mounts: EPERM");
  CHECK(namespace_exit_reason(CLD_EXITED, 127, "exec /x: No such file") ==
        "agent exited with status 127: exec /x: No such file");
}
