#include "server/drivers/namespace/mounts.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sstream>

#include "common/unique_fd.h"
#include "server/drivers/namespace/launcher_args.h"
#include "server/drivers/namespace/sys_util.h"

namespace cabin::nsbox {
namespace {

constexpr unsigned long kNoSuidDev = MS_NOSUID | MS_NODEV;
constexpr unsigned long kNoSuidDevExec = MS_NOSUID | MS_NODEV | MS_NOEXEC;

Result<void> mkdirs(const std::string& path, mode_t mode = 0755) {
  std::string cur;
  size_t pos = 1;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    cur = path.substr(0, next);
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) return sys_error("mkdir " + cur);
    pos = next + 1;
  }
  return {};
}

Result<void> touch(const std::string& path) {
  auto slash = path.rfind('/');
  if (auto r = mkdirs(path.substr(0, slash)); !r) return r;
  UniqueFd fd(retry_eintr(
      [&] { return ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644); }));
  if (!fd.valid()) return sys_error("create " + path);
  return {};
}

Result<void> do_mount(const char* source, const std::string& target, const char* fstype,
                      unsigned long flags, const std::string& data) {
  if (::mount(source, target.c_str(), fstype, flags, data.empty() ? nullptr : data.c_str()) != 0)
    return sys_error(std::string("mount ") + (fstype ? fstype : (source ? source : "")) + " on " +
                     target);
  return {};
}

// Flags a bind remount must keep: the kernel refuses to clear locked nosuid/nodev/noexec/atime.
unsigned long kept_flags(const std::string& mount_point) {
  struct statvfs st {};
  if (::statvfs(mount_point.c_str(), &st) != 0) return 0;
  unsigned long f = 0;
  if (st.f_flag & ST_NOSUID) f |= MS_NOSUID;
  if (st.f_flag & ST_NODEV) f |= MS_NODEV;
  if (st.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  if (st.f_flag & ST_NOATIME) f |= MS_NOATIME;
  if (st.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
  if (st.f_flag & ST_RELATIME) f |= MS_RELATIME;
  return f;
}

Result<void> remount_bind(const std::string& mount_point, unsigned long flags) {
  return do_mount(nullptr, mount_point, nullptr,
                  MS_REMOUNT | MS_BIND | kept_flags(mount_point) | flags, "");
}

// Mount points at or under `top`, from /proc/self/mountinfo (field 5).
std::vector<std::string> mounts_under(const std::string& top) {
  std::vector<std::string> out;
  auto text = read_file("/proc/self/mountinfo", 8 << 20);
  if (!text) return out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, mp;
    if (!(f >> id >> parent >> dev >> root >> mp)) continue;
    mp = unescape_mountinfo(mp);
    if (mp == top || mp.rfind(top + "/", 0) == 0) out.push_back(mp);
  }
  return out;
}

Result<void> bind_read_only(const std::string& source, const std::string& target,
                            unsigned long flags) {
  if (auto r = mkdirs(target); !r) return r;
  if (auto r = do_mount(source.c_str(), target, nullptr, MS_BIND | MS_REC, ""); !r) return r;
  // MS_REC carries submounts (e.g. /etc/hosts in containers); each must be made read-only too.
  for (const auto& mp : mounts_under(target)) {
    if (auto r = remount_bind(mp, MS_RDONLY | flags); !r) return r;
  }
  return {};
}

Result<void> apply(const MountEntry& e, const std::string& root) {
  const std::string target = root + e.target;
  switch (e.kind) {
    case MountKind::kTmpfs:
      if (auto r = mkdirs(target); !r) return r;
      return do_mount("tmpfs", target, "tmpfs", e.flags, e.data);
    case MountKind::kBindRo:
      return bind_read_only(e.source, target, e.flags);
    case MountKind::kBindRw:
      if (auto r = mkdirs(target); !r) return r;
      if (auto r = do_mount(e.source.c_str(), target, nullptr, MS_BIND, ""); !r) return r;
      return remount_bind(target, e.flags);
    case MountKind::kBindFileRo:
      if (auto r = touch(target); !r) return r;
      if (auto r = do_mount(e.source.c_str(), target, nullptr, MS_BIND, ""); !r) return r;
      return remount_bind(target, MS_RDONLY | e.flags);
    case MountKind::kBindDev:
      if (auto r = touch(target); !r) return r;
      return do_mount(e.source.c_str(), target, nullptr, MS_BIND, "");
    case MountKind::kHostEntry: {
      struct stat st {};
      if (::lstat(e.source.c_str(), &st) != 0) return {};  // absent on this host
      if (S_ISLNK(st.st_mode)) {
        char buf[4096];
        ssize_t n = ::readlink(e.source.c_str(), buf, sizeof buf - 1);
        if (n < 0) return sys_error("readlink " + e.source);
        if (auto r = mkdirs(target.substr(0, target.rfind('/'))); !r) return r;
        if (::symlink(std::string(buf, static_cast<size_t>(n)).c_str(), target.c_str()) != 0)
          return sys_error("symlink " + target);
        return {};
      }
      if (S_ISREG(st.st_mode)) {
        if (auto r = touch(target); !r) return r;
        if (auto r = do_mount(e.source.c_str(), target, nullptr, MS_BIND, ""); !r) return r;
        return remount_bind(target, MS_RDONLY | e.flags);
      }
      if (!S_ISDIR(st.st_mode)) return {};
      return bind_read_only(e.source, target, e.flags);
    }
    case MountKind::kProc:
      if (auto r = mkdirs(target); !r) return r;
      return do_mount("proc", target, "proc", e.flags, e.data);
    case MountKind::kSysfs:
      if (auto r = mkdirs(target); !r) return r;
      return do_mount("sysfs", target, "sysfs", e.flags, e.data);
    case MountKind::kDevpts:
      if (auto r = mkdirs(target); !r) return r;
      return do_mount("devpts", target, "devpts", e.flags, e.data);
    case MountKind::kSymlink:
      if (::symlink(e.source.c_str(), target.c_str()) != 0) return sys_error("symlink " + target);
      return {};
    case MountKind::kRemountRo:
      return remount_bind(target, MS_RDONLY | e.flags);
  }
  return {};
}

// What of the host's /etc the sandbox sees: only what Chromium, Xvfb, the agent and common tools
// read. The rest (service configs, keys, an EnvironmentFile holding the API key) stays hidden.
struct EtcEntry {
  const char* path;
  const char* why;
};
constexpr EtcEntry kHostEtc[] = {
    {"/etc/ld.so.cache", "the dynamic loader's library index"},
    {"/etc/passwd", "user names: getpwuid, id, Chromium's profile lookups"},
    {"/etc/group", "group names, as passwd"},
    {"/etc/nsswitch.conf", "where glibc looks up users and hosts"},
    {"/etc/hosts", "localhost resolves without DNS"},
    {"/etc/fonts", "fontconfig's configuration: without it Chromium finds no fonts"},
    {"/etc/ssl/certs", "CA certificates for HTTPS (links into /usr/share/ca-certificates)"},
    {"/etc/alternatives", "targets of /usr/bin links such as x-www-browser and python"},
    {"/etc/localtime", "the time zone"},
    {"/etc/timezone", "the time zone's name"},
    {"/etc/chromium/master_preferences",
     "Chromium's first-run preferences (not the host's policies)"},
    {"/etc/chromium.d", "flags the Debian chromium wrapper script reads"},
    {"/etc/os-release", "the distribution, read by Chromium and tools"},
    {"/etc/mime.types", "file types for downloads and uploads"},
    {"/etc/xdg", "desktop defaults (menus, MIME) some toolkits read"},
    {"/etc/gtk-3.0", "GTK settings for Chromium's dialogs"},
    {"/etc/X11", "X11 client defaults"},
};

}  // namespace

std::vector<MountEntry> sandbox_mounts(const MountPlan& plan) {
  const std::string size = "size=" + std::to_string(plan.tmpfs_bytes);
  const std::string ids =
      ",uid=" + std::to_string(kSandboxUid) + ",gid=" + std::to_string(kSandboxGid);
  std::vector<MountEntry> t = {
      {MountKind::kBindRo, "/usr", "/usr", MS_NOSUID | MS_NODEV, "", false,
       "programs and libraries, the host's, read-only; nosuid so no setuid binary helps"},
      {MountKind::kTmpfs, "", "/etc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m,mode=0755", false,
       "an empty /etc that holds only the host entries below"},
  };
  for (const auto& e : kHostEtc) {
    t.push_back({MountKind::kHostEntry, e.path, e.path, MS_NOSUID | MS_NODEV, "", false, e.why});
  }
  if (!plan.chromium_policy_source.empty()) {
    t.push_back({MountKind::kBindFileRo, plan.chromium_policy_source, kSandboxChromiumPolicyPath,
                 MS_NOSUID | MS_NODEV | MS_NOEXEC, "", false,
                 "Chromium's managed policy: the proxy fixed, no DNS of its own, no prediction"});
  }
  t.push_back({MountKind::kRemountRo, "", "/etc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "", false,
               "nothing may add files to /etc"});
  const std::vector<MountEntry> rest = {
      {MountKind::kBindRo, "/var/cache/fontconfig", "/var/cache/fontconfig",
       MS_NOSUID | MS_NODEV | MS_NOEXEC, "", true,
       "the system font cache; without it every sandbox's Chromium rebuilds one at start"},
      {MountKind::kHostEntry, "/bin", "/bin", MS_NOSUID | MS_NODEV, "", false,
       "merged-/usr symlink, or a read-only bind on split-/usr hosts"},
      {MountKind::kHostEntry, "/sbin", "/sbin", MS_NOSUID | MS_NODEV, "", false, "as /bin"},
      {MountKind::kHostEntry, "/lib", "/lib", MS_NOSUID | MS_NODEV, "", false,
       "as /bin; holds the dynamic loader path"},
      {MountKind::kHostEntry, "/lib32", "/lib32", MS_NOSUID | MS_NODEV, "", false, "as /lib"},
      {MountKind::kHostEntry, "/lib64", "/lib64", MS_NOSUID | MS_NODEV, "", false,
       "as /lib; /lib64/ld-linux-x86-64.so.2 is the x86-64 loader"},
      {MountKind::kHostEntry, "/libx32", "/libx32", MS_NOSUID | MS_NODEV, "", false, "as /lib"},
      {MountKind::kTmpfs, "", "/dev", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755", false,
       "a minimal /dev holding only the nodes below"},
      {MountKind::kBindDev, "/dev/null", "/dev/null", 0, "", false, "the usual sink"},
      {MountKind::kBindDev, "/dev/zero", "/dev/zero", 0, "", false, "zero pages"},
      {MountKind::kBindDev, "/dev/full", "/dev/full", 0, "", false, "ENOSPC on write"},
      {MountKind::kBindDev, "/dev/random", "/dev/random", 0, "", false, "entropy"},
      {MountKind::kBindDev, "/dev/urandom", "/dev/urandom", 0, "", false, "entropy"},
      {MountKind::kBindDev, "/dev/tty", "/dev/tty", 0, "", false,
       "opened by some tools; without a controlling terminal it answers ENXIO"},
      {MountKind::kSymlink, "/proc/self/fd", "/dev/fd", 0, "", false, "bash process substitution"},
      {MountKind::kSymlink, "/proc/self/fd/0", "/dev/stdin", 0, "", false, "conventional"},
      {MountKind::kSymlink, "/proc/self/fd/1", "/dev/stdout", 0, "", false, "conventional"},
      {MountKind::kSymlink, "/proc/self/fd/2", "/dev/stderr", 0, "", false, "conventional"},
      {MountKind::kTmpfs, "", "/dev/shm", kNoSuidDev, size + ",mode=1777", false,
       "POSIX shared memory; Chromium needs it"},
      {MountKind::kDevpts, "", "/dev/pts", MS_NOSUID | MS_NOEXEC,
       "newinstance,ptmxmode=0666,mode=0620", true, "private ptys for terminals"},
      {MountKind::kSymlink, "pts/ptmx", "/dev/ptmx", 0, "", false, "the private instance's ptmx"},
      {MountKind::kRemountRo, "", "/dev", MS_NOSUID | MS_NOEXEC, "", false,
       "nothing may add device nodes or files to /dev"},
      {MountKind::kProc, "", "/proc", kNoSuidDevExec, "hidepid=invisible", false,
       "procfs of the sandbox's pid namespace: host processes are invisible, and a process sees "
       "only those it could ptrace: exec'd commands (their own uid) not the agent's, Xvfb's or "
       "Chromium's"},
      {MountKind::kSysfs, "", "/sys", MS_RDONLY | kNoSuidDevExec, "", true,
       "read-only; Chromium reads cpu and device info, and the netns shows only lo"},
      {MountKind::kTmpfs, "", "/tmp", kNoSuidDev, size + ",mode=1777", false,
       "private scratch space, e.g. the X11 socket"},
      {MountKind::kTmpfs, "", "/var/tmp", kNoSuidDev, size + ",mode=1777", false,
       "private scratch space some tools expect"},
      {MountKind::kTmpfs, "", kSandboxHome, kNoSuidDev, size + ",mode=0770" + ids, false,
       "the sandbox user's home: Chromium profile, downloads; its group's too, which exec'd "
       "commands run in"},
  };
  t.insert(t.end(), rest.begin(), rest.end());
  if (!plan.profile_source.empty()) {
    t.push_back({MountKind::kBindRw, plan.profile_source, kSandboxProfilePath,
                 MS_NOSUID | MS_NODEV | MS_NOEXEC, "", false,
                 "the session's saved profile, which cabind packs when the session ends"});
  }
  if (!plan.agent_source.empty()) {
    t.push_back({MountKind::kBindFileRo, plan.agent_source, kSandboxAgentPath, MS_NOSUID | MS_NODEV,
                 "", false, "the cabin-agent binary, read-only"});
  }
  return t;
}

Result<void> build_and_enter_root(const std::vector<MountEntry>& table, const std::string& new_root,
                                  std::vector<std::string>* warnings) {
  // Nothing below may propagate back to the host's mount namespace.
  if (auto r = do_mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, ""); !r) return r;
  if (auto r = do_mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755"); !r)
    return r;
  for (const auto& e : table) {
    auto r = apply(e, new_root);
    if (r) continue;
    if (!e.optional) return r;
    if (warnings) warnings->push_back(r.error().message);
  }
  if (::chdir(new_root.c_str()) != 0) return sys_error("chdir new root");
  // pivot_root(".", ".") stacks the old root on top of the new one; detaching it leaves only ours.
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return sys_error("pivot_root");
  if (::umount2(".", MNT_DETACH) != 0) return sys_error("detach old root");
  if (::chdir("/") != 0) return sys_error("chdir /");
  return remount_bind("/", MS_RDONLY | MS_NOSUID | MS_NODEV);
}

std::string unescape_mountinfo(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const char a = field[i + 1], b = field[i + 2], c = field[i + 3];
      if (a >= '0' && a <= '3' && b >= '0' && b <= '7' && c >= '0' && c <= '7') {
        out.push_back(static_cast<char>((a - '0') * 64 + (b - '0') * 8 + (c - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

}  // namespace cabin::nsbox
