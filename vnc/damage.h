// DamageTracker: tells whether anything on the screen changed since it was last asked (XDamage).
#pragma once

#include <memory>

#include "common/result.h"
#include "vnc/display.h"

namespace cabin::vnc {

// Use with an event loop: wait until fd() is readable (e.g. an Asio posix::stream_descriptor's
// async_wait(wait_read), never reading from it yourself), then call take_damage(). Xlib may
// already hold events it read during another call, which leaves the fd quiet, so call
// take_damage() before every wait, not only after one.
//
// It drains every event queued on the Display's connection; nothing else in vnc/ consumes
// events, and keyboard-mapping notices among them are applied to Xlib's cache here.
struct DamageOptions {
  bool watch_cursor = false;  // also report pointer shape changes (XFixes cursor notify)
};

class DamageTracker {
 public:
  static Result<DamageTracker> create(Display& display, DamageOptions options = {});

  DamageTracker(DamageTracker&&) noexcept;
  DamageTracker& operator=(DamageTracker&&) noexcept;
  ~DamageTracker();

  int fd() const;

  // True when the screen changed since the previous call. The X server counts the whole screen
  // as damaged when tracking starts, so the first call (once its event arrived) is true too.
  // Does not block.
  // A change that lands while this runs is reported by this call or the next, never lost.
  bool take_damage();

  struct Changes {
    bool screen = false;
    bool cursor = false;  // the pointer's shape changed (only with watch_cursor)
  };
  // take_damage() plus cursor changes; a cursor change seen by take_damage() waits here.
  Changes take_changes();

 private:
  struct Impl;
  explicit DamageTracker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cabin::vnc
