// cabin-sandbox's outer process: joins cgroups, clones PID 1 into new namespaces, maps ids, waits.
#pragma once

#include "server/drivers/namespace/launcher_args.h"

namespace cabin::nsbox {

// Runs the sandbox described by `args` to its end and returns the exit status to use. When the
// payload died by a signal the launcher re-raises it, so its own status mirrors the payload's.
int run_launcher(const LauncherArgs& args);

}  // namespace cabin::nsbox
