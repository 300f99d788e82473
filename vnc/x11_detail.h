// Internal to vnc/: the Xlib state behind Display; only vnc/*.cpp include it.
#pragma once

#include <X11/Xlib.h>

#include <string>
#include <string_view>

#include "common/result.h"
#include "vnc/display.h"

namespace cabin::vnc::detail {

struct DisplayImpl {
  ::Display* dpy = nullptr;
  std::string name;
  int screen = 0;
  ::Window root = 0;
  Size size;
  bool lost = false;
  // First protocol error since the last take_error(); Xlib reports them asynchronously.
  int error_code = 0;
  int error_request = 0;

  ~DisplayImpl();

  // kUnavailable if the connection is gone, else ok.
  Result<void> check_alive() const;
  // XSync, then the first protocol error seen (if any) as an Error naming `what`.
  Result<void> sync(std::string_view what);
  // Forgets errors reported so far (after an XSync the caller chose to ignore).
  void clear_error() { error_code = error_request = 0; }
};

Error lost_error(const std::string& display_name);

}  // namespace cabin::vnc::detail
