// `cabind vnc-forward SESSION`: a local listener that carries a native VNC client's RFB over the
// authenticated /v1/sessions/{id}/vnc WebSocket.
#pragma once

namespace cabin {

// argv[0] is "vnc-forward". Returns the process exit status (2: bad arguments).
int run_vnc_forward(int argc, char** argv);

}  // namespace cabin
