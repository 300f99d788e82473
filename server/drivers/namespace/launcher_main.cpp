// cabin-sandbox: starts one namespace sandbox and its payload; see launcher_args.h for the flags.
#include <cstdio>
#include <string>
#include <vector>

#include "server/drivers/namespace/launcher.h"
#include "server/drivers/namespace/launcher_args.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  auto parsed = cabin::nsbox::parse_launcher_args(args);
  if (!parsed) {
    std::fprintf(stderr,
                 "cabin-sandbox: %s\n"
                 "usage: cabin-sandbox --id ID [--run-dir DIR] [--agent PATH]\n"
                 "         [--map-root UID:GID --map-user UID:GID] [--cgroup-procs FILE]...\n"
                 "         [--tmpfs-size BYTES] [--probe] -- ARGV...\n",
                 parsed.error().message.c_str());
    return cabin::nsbox::kSetupFailedStatus;
  }
  return cabin::nsbox::run_launcher(parsed.value());
}
