// Cancellation: a flag that is set once, with one callback run when it is; for work that waits
// long on something else and must stop when whoever asked for it has gone (a queued create whose
// client closed its connection). For one thread.
#pragma once

#include <functional>
#include <utility>

namespace cabin {

class Cancellation {
 public:
  Cancellation() = default;
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  bool cancelled() const { return cancelled_; }
  // Sets the flag and runs the callback (once).
  void cancel() {
    if (cancelled_) return;
    cancelled_ = true;
    if (auto f = std::move(on_cancel_)) f();
  }
  // Run on cancel(), or at once if cancelled already; an empty function unregisters.
  void on_cancel(std::function<void()> f) {
    on_cancel_ = std::move(f);
    if (cancelled_ && on_cancel_) std::exchange(on_cancel_, nullptr)();
  }

 private:
  bool cancelled_ = false;
  std::function<void()> on_cancel_;
};

}  // namespace cabin
