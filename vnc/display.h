// Display: one Xlib connection to an X server, the handle capture, damage and input share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "vnc/image.h"

namespace cabin::vnc {

namespace detail {
struct DisplayImpl;
}

// Not thread-safe: a Display and everything made from it are used from one thread at a time
// (cabin-agent runs one io_context thread). Capturer, DamageTracker and Input keep a pointer to
// the connection, so the Display must outlive them; moving the Display object is fine.
//
// A lost connection (the X server died) never ends the process, as Xlib's default handler
// would: the Display marks itself lost and every later call returns kUnavailable.
// Lets several threads each use their own Display (Xlib's shared state gets locks). Call once,
// before any other Xlib call in the process.
void init_threads();

class Display {
 public:
  // `name` as in $DISPLAY (":99"); empty means $DISPLAY.
  static Result<Display> open(std::string_view name);

  Display(Display&&) noexcept;
  Display& operator=(Display&&) noexcept;
  ~Display();

  const std::string& name() const;
  // Size of the default screen's root window, read when opened. Capture objects are sized from
  // it, so a screen that changes size (RandR) needs a new Display.
  Size size() const;
  // The root window's size now (one round trip), to notice a resize.
  Result<Size> query_size();
  // The connection's socket: readable when events (damage) arrive. Owned by the Display.
  int fd() const;
  // True once the connection to the server broke.
  bool lost() const;
  // One round trip; returns the first X protocol error the server reported since the last check.
  Result<void> sync();
  // Whether a top-level window of process `pid` (its _NET_WM_PID) is mapped and viewable: from
  // then on the window takes pointer and key events, before that they go to the root window.
  Result<bool> has_viewable_window(int64_t pid);

  detail::DisplayImpl& impl() const { return *impl_; }

 private:
  explicit Display(std::unique_ptr<detail::DisplayImpl> impl);
  std::unique_ptr<detail::DisplayImpl> impl_;
};

}  // namespace cabin::vnc
