// Test helpers: a private Xvfb per test, and a plain Xlib client that draws and watches events.
#pragma once

// clang-format off
#include <catch2/catch.hpp>  // before Xlib, whose macros (None, Always) break it
// clang-format on

#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

extern char** environ;

namespace cabin::vnc::testing {

// Xvfb on a display it picks itself (-displayfd), black root (-br), no TCP. Ready when the
// constructor returns: it waits for the display number on the pipe, never sleeps.
class Xvfb {
 public:
  Xvfb(int width, int height) {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    constexpr int kChildFd = 9;
    if (fds[1] == kChildFd) {  // dup2 onto itself would keep CLOEXEC
      const int moved = ::fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
      ::close(fds[1]);
      fds[1] = moved;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], kChildFd);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    const std::string screen = std::to_string(width) + "x" + std::to_string(height) + "x24";
    const char* argv[] = {"Xvfb",      "-displayfd", "9",   "-screen",  "0",    screen.c_str(),
                          "-nolisten", "tcp",        "-br", "-noreset", nullptr};
    const int rc = ::posix_spawnp(&pid_, "Xvfb", &fa, nullptr, const_cast<char**>(argv), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    REQUIRE(rc == 0);
    std::string number;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (number.empty() || number.back() != '\n') {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      REQUIRE(left.count() > 0);
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[16];
      const ssize_t n = ::read(fds[0], buf, sizeof(buf));
      REQUIRE(n > 0);  // EOF: Xvfb died before it was ready
      number.append(buf, n);
    }
    ::close(fds[0]);
    name_ = ":" + number.substr(0, number.size() - 1);
  }
  ~Xvfb() { kill(); }
  Xvfb(const Xvfb&) = delete;
  Xvfb& operator=(const Xvfb&) = delete;

  const std::string& name() const { return name_; }

  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  std::string name_;
};

// An ordinary X client, independent of cabin::vnc: draws known pixels and reads events.
class Client {
 public:
  explicit Client(const std::string& display) {
    dpy_ = XOpenDisplay(display.c_str());
    REQUIRE(dpy_ != nullptr);
    root_ = DefaultRootWindow(dpy_);
    gc_ = XCreateGC(dpy_, root_, 0, nullptr);
  }
  ~Client() {
    XFreeGC(dpy_, gc_);
    XCloseDisplay(dpy_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  ::Display* dpy() const { return dpy_; }
  ::Window root() const { return root_; }

  // rgb as 0xRRGGBB; on a 24-bit TrueColor screen that is the pixel value.
  void fill(::Drawable d, int x, int y, int w, int h, unsigned long rgb) {
    XSetForeground(dpy_, gc_, rgb);
    XFillRectangle(dpy_, d, gc_, x, y, w, h);
  }
  void fill_root(int x, int y, int w, int h, unsigned long rgb) { fill(root_, x, y, w, h, rgb); }
  void sync() { XSync(dpy_, False); }

  // A mapped, focused window covering the screen that reports keys, buttons and motion.
  ::Window make_input_window() {
    const int w = DisplayWidth(dpy_, 0);
    const int h = DisplayHeight(dpy_, 0);
    ::Window win = XCreateSimpleWindow(dpy_, root_, 0, 0, w, h, 0, 0, 0xffffff);
    XSelectInput(dpy_, win,
                 KeyPressMask | KeyReleaseMask | ButtonPressMask | ButtonReleaseMask |
                     PointerMotionMask | StructureNotifyMask);
    XMapWindow(dpy_, win);
    XEvent ev;
    REQUIRE(next_event(ev, [&](const XEvent& e) { return e.type == MapNotify; }));
    XSetInputFocus(dpy_, win, RevertToPointerRoot, CurrentTime);
    XSync(dpy_, False);
    return win;
  }

  // The next event matching `want`, waiting on the socket with poll(); false on timeout.
  // MappingNotify is applied to Xlib's keymap cache as any client would.
  bool next_event(XEvent& out, const std::function<bool(const XEvent&)>& want,
                  std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      while (XPending(dpy_) > 0) {
        XNextEvent(dpy_, &out);
        if (out.type == MappingNotify) XRefreshKeyboardMapping(&out.xmapping);
        if (want(out)) return true;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{ConnectionNumber(dpy_), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
    }
  }

  // True when no key is down on the server.
  bool no_key_down() {
    char keys[32];
    XQueryKeymap(dpy_, keys);
    for (char k : keys) {
      if (k != 0) return false;
    }
    return true;
  }

  unsigned pointer_mask(int* x = nullptr, int* y = nullptr) {
    ::Window r = 0, c = 0;
    int rx = 0, ry = 0, wx = 0, wy = 0;
    unsigned mask = 0;
    XQueryPointer(dpy_, root_, &r, &c, &rx, &ry, &wx, &wy, &mask);
    if (x != nullptr) *x = rx;
    if (y != nullptr) *y = ry;
    return mask;
  }

 private:
  ::Display* dpy_ = nullptr;
  ::Window root_ = 0;
  GC gc_{};
};

}  // namespace cabin::vnc::testing
