// cabin-vmm-wrap: makes the kernel kill QEMU when cabind dies, then becomes QEMU.
//
//   cabin-vmm-wrap --parent PID -- /usr/bin/qemu-system-x86_64 ARGS...
//
// QEMU 7.2 has no option for this. PR_SET_PDEATHSIG survives execve, and fires when the thread
// that spawned us exits: cabind spawns from its one io_context thread, which lives as long as it.
#include <linux/close_range.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc < 5 || std::strcmp(argv[1], "--parent") != 0 || std::strcmp(argv[3], "--") != 0) {
    std::fprintf(stderr, "usage: cabin-vmm-wrap --parent PID -- QEMU [ARGS...]\n");
    return 125;
  }
  char* end = nullptr;
  const long parent = std::strtol(argv[2], &end, 10);
  if (*end != '\0' || parent <= 0) {
    std::fprintf(stderr, "cabin-vmm-wrap: bad --parent %s\n", argv[2]);
    return 125;
  }
  // QEMU gets no descriptor of cabind's but stdio, whatever cabind forgot to mark CLOEXEC: a
  // VMM holding cabind's sockets could accept its clients or talk to other sessions' agents.
  if (::syscall(SYS_close_range, 3u, ~0u, 0u) != 0) {
    std::fprintf(stderr, "cabin-vmm-wrap: close_range: %s\n", std::strerror(errno));
    return 125;
  }
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    std::fprintf(stderr, "cabin-vmm-wrap: PR_SET_PDEATHSIG: %s\n", std::strerror(errno));
    return 125;
  }
  // cabind died before the prctl took effect: nobody would ever stop this VM.
  if (::getppid() != static_cast<pid_t>(parent)) return 125;
  ::execv(argv[4], argv + 4);
  std::fprintf(stderr, "cabin-vmm-wrap: exec %s: %s\n", argv[4], std::strerror(errno));
  return 127;
}
