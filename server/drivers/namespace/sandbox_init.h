// The sandbox's PID 1: builds the sandbox from inside its namespaces, starts the payload, reaps.
#pragma once

#include <string>
#include <vector>

#include "server/drivers/namespace/launcher_args.h"
#include "server/drivers/namespace/userns.h"

namespace cabin::nsbox {

// Descriptors the launcher hands to PID 1 across clone().
struct InitFds {
  int release = -1;  // read end: one byte once the id maps are written
  int report = -1;   // write end: the payload's raw wait status (4 bytes) before PID 1 exits
};

// The payload's environment: nothing of cabind's but the agent secret and the certificates the
// sandbox trusts (CABIN_TRUSTED_CA, PEM).
std::vector<std::string> payload_environment(const char* agent_secret,
                                             const char* trusted_ca = nullptr);

// Runs as PID 1 of the new namespaces; never returns. Exits kSetupFailedStatus when a setup step
// fails, after writing the step to stderr.
[[noreturn]] void run_sandbox_init(const LauncherArgs& args, const IdMaps& maps,
                                   const InitFds& fds);

}  // namespace cabin::nsbox
