// The sandbox's network namespace: loopback only, brought up so 127.0.0.1 works inside.
#pragma once

#include "common/result.h"

namespace cabin::nsbox {

// Sets IFF_UP on "lo" (SIOCSIFFLAGS); a fresh net namespace starts with lo down.
Result<void> bring_up_loopback();

}  // namespace cabin::nsbox
