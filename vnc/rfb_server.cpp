#include "vnc/rfb_server.h"

// clang-format off
#include <rfb/rfb.h>  // before Xlib-based headers: both define Bool-ish macros
// clang-format on

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/unique_fd.h"
#include "vnc/capture.h"
#include "vnc/clipboard.h"
#include "vnc/damage.h"
#include "vnc/display.h"
#include "vnc/input.h"

namespace cabin::vnc {
namespace {

using Clock = std::chrono::steady_clock;

// Changes are found by comparing captures tile by tile; a tile is the smallest rectangle sent.
constexpr int kTile = 32;
// A vertical shift of the screen is sent as CopyRect when at least this many rows (and an eighth
// of the screen) moved by the same distance: a scrolled page then costs only its new rows.
constexpr int kMinScrollRows = 32;
// A viewer that takes longer than this to accept a write is disconnected (libvncserver waits
// in blocking sends; its default is 20 s).
constexpr int kClientWaitMs = 5000;

// A fast 64-bit hash of one row of pixels (not cryptographic: equal rows are then compared).
uint64_t row_hash(const uint8_t* p, size_t bytes) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

const std::shared_ptr<spdlog::logger>& log() {
  static auto l = logger("vnc.rfb");
  return l;
}

// libvncserver's own logging, into ours: chatty lines at debug, errors as warnings.
void vlog(bool error, const char* format, va_list ap) {
  char buf[512];
  std::vsnprintf(buf, sizeof(buf), format, ap);
  std::string_view line(buf);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (error) {
    log()->warn("libvncserver: {}", line);
  } else {
    log()->debug("libvncserver: {}", line);
  }
}
void rfb_log(const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  vlog(false, format, ap);
  va_end(ap);
}
void rfb_err(const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  vlog(true, format, ap);
  va_end(ap);
}

void install_logging_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    rfbLog = rfb_log;
    rfbErr = rfb_err;
    rfbMaxClientWait = kClientWaitMs;
  });
}

Result<UniqueFd> listen_on(const std::string& host, uint16_t port, uint16_t& bound) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof(*v6);
  } else {
    return make_error(Errc::kInvalidArgument, "bad_listen", "not an IP address: " + host);
  }
  UniqueFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return make_error(Errc::kInternal, "socket", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd.get(), 16) != 0) {
    return make_error(
        Errc::kUnavailable, "listen_failed",
        "cannot listen on " + host + ":" + std::to_string(port) + ": " + std::strerror(errno));
  }
  sockaddr_storage got{};
  socklen_t got_len = sizeof(got);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&got), &got_len);
  bound = ntohs(got.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&got)->sin_port
                                         : reinterpret_cast<sockaddr_in6*>(&got)->sin6_port);
  return fd;
}

}  // namespace

struct RfbServer::Impl {
  RfbServerOptions opt;

  // The X side. Capture objects are sized from their Display, so a resize reopens all of them.
  // Declared in dependency order: the Display outlives what points into it.
  std::optional<Display> display;
  std::optional<Capturer> capturer;
  std::optional<DamageTracker> damage;
  std::optional<Input> input;
  // The clipboard reads every event on its connection, so it has one of its own.
  std::optional<Display> clip_display;
  std::optional<Clipboard> clipboard;

  Size size;
  Image grab;                       // the newest capture
  std::vector<char> fb;             // what viewers are sent: changed tiles of `grab`, BGRX
  std::vector<uint64_t> fb_rows;    // row_hash of each fb row (empty: unknown)
  std::vector<uint64_t> grab_rows;  // row_hash of each grab row
  rfbScreenInfoPtr screen = nullptr;
  UniqueFd listener;
  UniqueFd wake;  // eventfd: the destructor's stop signal
  uint16_t port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};

  bool dirty = true;  // the screen may differ from fb
  Clock::time_point next_frame{};
  uint64_t cursor_serial = 0;
  int buttons = 0;  // RFB button mask last applied
  Point pointer{-1, -1};

  mutable std::mutex stats_mu;
  RfbStats stats;

  // The clipboard as last seen, and text from another thread to put there; under clip_mu.
  mutable std::mutex clip_mu;
  std::string clip_text;
  std::optional<std::string> clip_pending;

  ~Impl() {
    if (screen != nullptr) {
      rfbShutdownServer(screen, TRUE);
      rfbScreenCleanup(screen);
    }
  }

  static Impl& of(rfbClientPtr cl) { return *static_cast<Impl*>(cl->screen->screenData); }

  template <typename F>
  void count(F f) {
    std::lock_guard lock(stats_mu);
    f(stats);
  }

  // All or nothing: on failure every X object is gone and x_ok() is false.
  Result<void> open_x() {
    input.reset();
    damage.reset();
    capturer.reset();
    display.reset();
    auto d = Display::open(opt.display);
    if (!d) return d.error();
    auto c = Capturer::create(*d, {.use_shm = opt.use_shm});
    if (!c) return c.error();
    auto t = DamageTracker::create(*d, {.watch_cursor = true});
    if (!t) return t.error();
    auto i = Input::create(*d);
    if (!i) return i.error();
    // The others point at the Display's heap state, so moving the Display object is fine.
    size = d->size();
    display.emplace(std::move(*d));
    capturer.emplace(std::move(*c));
    damage.emplace(std::move(*t));
    input.emplace(std::move(*i));
    return {};
  }

  bool x_ok() const { return display && !display->lost() && capturer && damage && input; }

  Result<void> open_clipboard() {
    auto d = Display::open(opt.display);
    if (!d) return d.error();
    clip_display.emplace(std::move(*d));
    auto c = Clipboard::create(*clip_display);
    if (!c) return c.error();
    clipboard.emplace(std::move(*c));
    return {};
  }

  void set_server_format() {
    // X hands out BGRX bytes (0x00RRGGBB little-endian words); serve them as they are.
    screen->serverFormat.redShift = 16;
    screen->serverFormat.greenShift = 8;
    screen->serverFormat.blueShift = 0;
  }

  Result<void> make_screen() {
    int argc = 1;
    char arg0[] = "cabin-agent";
    char* argv[] = {arg0, nullptr};
    fb.assign(static_cast<size_t>(size.width) * size.height * 4, 0);
    screen = rfbGetScreen(&argc, argv, size.width, size.height, 8, 3, 4);
    if (screen == nullptr) return make_error(Errc::kInternal, "rfb_screen", "rfbGetScreen failed");
    screen->screenData = this;
    screen->frameBuffer = fb.data();
    set_server_format();
    screen->desktopName = "Cabin";
    // No listening sockets of libvncserver's own (it would bind every interface and IPv6 on
    // its own terms); connections we accept are handed to it.
    screen->port = 0;
    screen->ipv6port = 0;
    screen->autoPort = FALSE;
    screen->httpPort = 0;
    screen->http6Port = 0;
    screen->httpDir = nullptr;
    screen->alwaysShared = TRUE;  // several viewers watch one screen
    screen->deferUpdateTime = 0;  // we already pace captures; send as soon as asked
    screen->handleEventsEagerly = TRUE;
    screen->permitFileTransfer = FALSE;
    screen->getFileTransferPermission = [](rfbClientPtr) -> int { return FALSE; };
    screen->setTextChat = nullptr;
    screen->newClientHook = on_new_client;
    screen->kbdAddEvent = on_key;
    screen->kbdReleaseAllKeys = on_release_all;
    screen->ptrAddEvent = on_pointer;
    screen->setXCutText = on_cut_text;
    screen->setXCutTextUTF8 = on_cut_text_utf8;
    rfbInitServer(screen);
    return {};
  }

  // --- libvncserver callbacks (on the server thread, inside rfbProcessEvents) -----------------

  static void on_client_gone(rfbClientPtr cl) {
    Impl& self = of(cl);
    self.count([](RfbStats& s) { --s.clients; });
    if (self.input) self.input->release_all().ok();
    self.buttons = 0;
  }

  static rfbNewClientAction on_new_client(rfbClientPtr cl) {
    Impl& self = of(cl);
    bool full = false;
    self.count([&](RfbStats& s) {
      full = s.clients >= self.opt.max_clients;
      if (!full) {
        ++s.clients;
        ++s.connections;
      }
    });
    if (full) {
      log()->warn("refusing a viewer: {} connected already", self.opt.max_clients);
      return RFB_CLIENT_REFUSE;
    }
    cl->clientGoneHook = on_client_gone;
    self.dirty = true;  // the framebuffer is only kept current while someone watches
    return RFB_CLIENT_ACCEPT;
  }

  static void on_key(rfbBool down, rfbKeySym key, rfbClientPtr cl) {
    Impl& self = of(cl);
    if (!self.input) return;
    // Clients differ in whether they send Shift with shifted symbols (noVNC does not for IME
    // and synthetic input): the keysym decides what is typed.
    auto r = down ? self.input->key_down_exact(key) : self.input->key_up(key);
    if (!r) log()->debug("key {:#x}: {}", key, r.error().message);
    self.count([](RfbStats& s) { ++s.input_events; });
  }

  static void on_release_all(rfbClientPtr cl) {
    Impl& self = of(cl);
    if (self.input) self.input->release_all().ok();
  }

  static void on_pointer(int mask, int x, int y, rfbClientPtr cl) {
    Impl& self = of(cl);
    if (!self.input) return;
    x = std::clamp(x, 0, self.size.width - 1);
    y = std::clamp(y, 0, self.size.height - 1);
    if (Point{x, y} != self.pointer) {
      if (auto r = self.input->move({x, y}); !r) log()->debug("move: {}", r.error().message);
      self.pointer = {x, y};
    }
    // Bits 0-2: left, middle, right; 3-6: wheel up, down, left, right (one notch per press);
    // bit 7: back.
    const int changed = mask ^ self.buttons;
    static constexpr Button kButtons[] = {Button::kLeft, Button::kMiddle, Button::kRight};
    for (int bit = 0; bit < 8; ++bit) {
      if ((changed & (1 << bit)) == 0) continue;
      const bool down = (mask & (1 << bit)) != 0;
      Result<void> r;
      if (bit < 3 || bit == 7) {
        const Button b = bit == 7 ? Button::kBack : kButtons[bit];
        r = down ? self.input->button_down(b) : self.input->button_up(b);
      } else if (down) {
        r = self.input->scroll(static_cast<ScrollDirection>(bit - 3), 1);
      }
      if (!r) log()->debug("button {}: {}", bit + 1, r.error().message);
    }
    self.buttons = mask;
    self.count([](RfbStats& s) { ++s.input_events; });
    rfbDefaultPtrAddEvent(mask, x, y, cl);  // moves libvncserver's cursor for the other viewers
  }

  void remember_clipboard(std::string utf8) {
    std::lock_guard lock(clip_mu);
    clip_text = std::move(utf8);
  }
  static void set_clipboard(Impl& self, std::string utf8) {
    if (!self.clipboard) return;
    std::string kept = utf8;
    if (auto r = self.clipboard->set_text(std::move(utf8)); !r) {
      log()->debug("clipboard: {}", r.error().message);
      return;
    }
    self.remember_clipboard(std::move(kept));
    self.count([](RfbStats& s) { ++s.cut_texts_in; });
  }
  static void on_cut_text(char* str, int len, rfbClientPtr cl) {
    if (len < 0) return;
    set_clipboard(of(cl), latin1_to_utf8(std::string_view(str, static_cast<size_t>(len))));
  }
  static void on_cut_text_utf8(char* str, int len, rfbClientPtr cl) {
    if (len < 0) return;
    set_clipboard(of(cl), std::string(str, static_cast<size_t>(len)));
  }

  // --- the loop ---------------------------------------------------------------------------

  int clients() {
    std::lock_guard lock(stats_mu);
    return stats.clients;
  }

  void update_cursor() {
    auto c = capturer->cursor();
    if (!c || c->width <= 0 || c->height <= 0 || c->serial == cursor_serial) return;
    cursor_serial = c->serial;
    const size_t n = static_cast<size_t>(c->width) * c->height;
    auto* cur = static_cast<rfbCursorPtr>(std::calloc(1, sizeof(rfbCursor)));
    auto* rich = static_cast<unsigned char*>(std::malloc(n * 4));
    auto* alpha = static_cast<unsigned char*>(std::malloc(n));
    if (cur == nullptr || rich == nullptr || alpha == nullptr) {
      std::free(cur);
      std::free(rich);
      std::free(alpha);
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      const uint32_t p = c->argb[i];  // premultiplied ARGB; our pixels are BGRX words
      std::memcpy(rich + i * 4, &p, 4);
      alpha[i] = static_cast<unsigned char>(p >> 24);
    }
    cur->width = static_cast<unsigned short>(c->width);
    cur->height = static_cast<unsigned short>(c->height);
    cur->xhot = static_cast<unsigned short>(c->hotspot.x);
    cur->yhot = static_cast<unsigned short>(c->hotspot.y);
    cur->richSource = rich;
    cur->alphaSource = alpha;
    cur->alphaPreMultiplied = TRUE;
    cur->mask =
        reinterpret_cast<unsigned char*>(rfbMakeMaskFromAlphaSource(c->width, c->height, alpha));
    cur->cleanup = TRUE;
    cur->cleanupMask = TRUE;
    cur->cleanupRichSource = TRUE;
    cur->cleanupSource = TRUE;
    rfbSetCursor(screen, cur);  // frees the previous one (cleanup)
  }

  void track_pointer() {
    auto p = input->pointer();
    if (!p || (p->x == screen->cursorX && p->y == screen->cursorY)) return;
    screen->cursorX = p->x;
    screen->cursorY = p->y;
    pointer = *p;
    rfbClientIteratorPtr it = rfbGetClientIterator(screen);
    while (rfbClientPtr cl = rfbClientIteratorNext(it)) {
      if (cl->enableCursorPosUpdates) cl->cursorWasMoved = TRUE;
    }
    rfbReleaseClientIterator(it);
  }

  Result<void> resize(Size to) {
    log()->info("screen resized to {}x{}", to.width, to.height);
    if (auto r = open_x(); !r) return r;
    std::vector<char> next(static_cast<size_t>(size.width) * size.height * 4, 0);
    // libvncserver still draws into the old buffer while it switches, so swap after.
    rfbNewFramebuffer(screen, next.data(), size.width, size.height, 8, 3, 4);
    set_server_format();
    rfbClientIteratorPtr it = rfbGetClientIterator(screen);
    while (rfbClientPtr cl = rfbClientIteratorNext(it)) screen->setTranslateFunction(cl);
    rfbReleaseClientIterator(it);
    fb.swap(next);
    fb_rows.clear();
    cursor_serial = 0;
    return {};
  }

  void capture() {
    auto now_size = display->query_size();
    if (!now_size) return;
    if (*now_size != size) {
      if (auto r = resize(*now_size); !r) {
        log()->warn("resize: {}", r.error().message);
        return;
      }
    }
    if (auto r = capturer->grab(grab); !r) {
      log()->debug("capture: {}", r.error().message);
      return;
    }
    const size_t stride = static_cast<size_t>(size.width) * 4;
    grab_rows.resize(static_cast<size_t>(size.height));
    for (int y = 0; y < size.height; ++y) grab_rows[y] = row_hash(grab.pixel(0, y), stride);
    bool any = copy_scroll();
    for (int ty = 0; ty < size.height; ty += kTile) {
      const int th = std::min(kTile, size.height - ty);
      for (int tx = 0; tx < size.width; tx += kTile) {
        const int tw = std::min(kTile, size.width - tx);
        const size_t bytes = static_cast<size_t>(tw) * 4;
        bool same = true;
        for (int y = ty; y < ty + th && same; ++y) {
          same = std::memcmp(fb.data() + y * stride + tx * 4, grab.pixel(tx, y), bytes) == 0;
        }
        if (same) continue;
        for (int y = ty; y < ty + th; ++y) {
          std::memcpy(fb.data() + y * stride + tx * 4, grab.pixel(tx, y), bytes);
        }
        rfbMarkRectAsModified(screen, tx, ty, tx + tw, ty + th);
        any = true;
      }
    }
    fb_rows.swap(grab_rows);  // fb now equals grab
    count([&](RfbStats& s) {
      ++s.captures;
      if (any) ++s.frames;
    });
  }

  // Finds the vertical shift most rows of `grab` show against `fb` (a scrolled page) and, when
  // it is clear enough, moves those rows in fb with a CopyRect for viewers. The tile diff that
  // follows sends whatever the shift did not explain.
  bool copy_scroll() {
    const int h = size.height;
    if (fb_rows.size() != static_cast<size_t>(h)) return false;
    int moved = 0;
    for (int y = 0; y < h; ++y) moved += fb_rows[y] != grab_rows[y] ? 1 : 0;
    const int min_rows = std::max(kMinScrollRows, h / 8);
    if (moved < min_rows) return false;
    // Rows whose content is unique in fb vote for the distance they moved (blank rows match
    // anywhere and would vote for everything).
    std::unordered_map<uint64_t, int> where;
    where.reserve(static_cast<size_t>(h) * 2);
    for (int y = 0; y < h; ++y) {
      auto [it, fresh] = where.emplace(fb_rows[y], y);
      if (!fresh) it->second = -1;
    }
    std::unordered_map<int, int> votes;
    for (int y = 0; y < h; ++y) {
      if (fb_rows[y] == grab_rows[y]) continue;
      auto it = where.find(grab_rows[y]);
      if (it != where.end() && it->second >= 0) ++votes[y - it->second];
    }
    int dy = 0, best = 0;
    for (auto [d, n] : votes) {
      if (n > best) std::tie(dy, best) = std::tie(d, n);
    }
    if (dy == 0 || best < min_rows) return false;
    // The destination band: from the first to the last row that the shift explains.
    int y0 = -1, y1 = -1;
    const size_t stride = static_cast<size_t>(size.width) * 4;
    for (int y = std::max(0, dy); y < std::min(h, h + dy); ++y) {
      if (grab_rows[y] != fb_rows[y - dy]) continue;
      if (std::memcmp(grab.pixel(0, y), fb.data() + (y - dy) * stride, stride) != 0) continue;
      if (y0 < 0) y0 = y;
      y1 = y + 1;
    }
    if (y0 < 0 || y1 - y0 < min_rows) return false;
    // Moves fb's rows (source: each row dy above) and schedules the CopyRect for every viewer.
    rfbDoCopyRect(screen, 0, y0, size.width, y1, 0, dy);
    std::vector<uint64_t> shifted = fb_rows;
    for (int y = y0; y < y1; ++y) shifted[y] = fb_rows[y - dy];
    fb_rows.swap(shifted);
    count([](RfbStats& s) { ++s.scroll_copies; });
    return true;
  }

  void accept_all() {
    for (;;) {
      int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a connection that vanished
      // rfbNewClient owns the fd from here (closes it when refused or gone).
      if (rfbNewClient(screen, fd) == nullptr) log()->debug("viewer handshake failed");
    }
  }

  void run() {
    const auto frame_gap = std::chrono::microseconds(1000000 / opt.max_fps);
    while (!stopping.load()) {
      // Client messages in, pending updates out.
      rfbProcessEvents(screen, 0);

      const bool watched = clients() > 0;
      if (x_ok()) {
        const auto changes = damage->take_changes();
        if (changes.screen) dirty = true;
        if (changes.cursor && watched) update_cursor();
      }
      if (clipboard) {
        std::optional<std::string> given;
        {
          std::lock_guard lock(clip_mu);
          given.swap(clip_pending);
        }
        if (given && clipboard->set_text(*given)) {
          remember_clipboard(*given);
          if (watched) {
            std::string latin1 = utf8_to_latin1(*given);
            rfbSendServerCutTextUTF8(screen, given->data(), static_cast<int>(given->size()),
                                     latin1.data(), static_cast<int>(latin1.size()));
          }
        }
        auto text = clipboard->process();
        if (text) remember_clipboard(*text);
        if (text && watched) {
          std::string latin1 = utf8_to_latin1(*text);
          rfbSendServerCutTextUTF8(screen, text->data(), static_cast<int>(text->size()),
                                   latin1.data(), static_cast<int>(latin1.size()));
          count([](RfbStats& s) { ++s.cut_texts_out; });
        }
      }
      const auto now = Clock::now();
      if (dirty && watched && now >= next_frame && x_ok()) {
        dirty = false;
        next_frame = now + frame_gap;
        if (cursor_serial == 0) update_cursor();
        track_pointer();
        capture();
        continue;  // send it before sleeping
      }

      std::vector<pollfd> fds;
      fds.push_back({wake.get(), POLLIN, 0});
      fds.push_back({listener.get(), POLLIN, 0});
      if (x_ok()) fds.push_back({damage->fd(), POLLIN, 0});
      if (clip_display && !clip_display->lost()) fds.push_back({clipboard->fd(), POLLIN, 0});
      rfbClientIteratorPtr it = rfbGetClientIterator(screen);
      while (rfbClientPtr cl = rfbClientIteratorNext(it)) {
        if (cl->sock != RFB_INVALID_SOCKET) fds.push_back({cl->sock, POLLIN, 0});
      }
      rfbReleaseClientIterator(it);
      int timeout = -1;  // idle: sleep until something happens
      if (dirty && watched && x_ok()) {
        timeout = static_cast<int>(std::max<int64_t>(
            0,
            std::chrono::duration_cast<std::chrono::milliseconds>(next_frame - now).count() + 1));
      }
      if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
        log()->error("poll: {}", std::strerror(errno));
        return;
      }
      if ((fds[0].revents & POLLIN) != 0) {
        uint64_t v = 0;
        (void)!::read(wake.get(), &v, sizeof(v));
      }
      if ((fds[1].revents & POLLIN) != 0) accept_all();
    }
  }
};

std::string RfbServer::clipboard_text() const {
  std::lock_guard lock(impl_->clip_mu);
  return impl_->clip_text;
}

void RfbServer::set_clipboard_text(std::string utf8) {
  {
    std::lock_guard lock(impl_->clip_mu);
    impl_->clip_text = utf8;
    impl_->clip_pending = std::move(utf8);
  }
  uint64_t one = 1;
  (void)!::write(impl_->wake.get(), &one, sizeof(one));
}

Result<std::unique_ptr<RfbServer>> RfbServer::start(RfbServerOptions options) {
  if (options.max_fps < 1 || options.max_fps > 240) {
    return make_error(Errc::kInvalidArgument, "bad_option", "max_fps must be 1..240");
  }
  if (options.max_clients < 1) {
    return make_error(Errc::kInvalidArgument, "bad_option", "max_clients must be positive");
  }
  install_logging_once();
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(options);
  if (auto r = impl->open_x(); !r) return r.error();
  if (auto r = impl->open_clipboard(); !r) return r.error();
  auto listener = listen_on(impl->opt.listen_host, impl->opt.port, impl->port);
  if (!listener) return listener.error();
  impl->listener = std::move(*listener);
  impl->wake = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->wake.valid()) return make_error(Errc::kInternal, "eventfd", std::strerror(errno));
  if (auto r = impl->make_screen(); !r) return r.error();
  // Handed over to the thread; nothing touches these X connections from here on.
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  log()->info("RFB server on {}:{} for display {} ({}x{})", raw->opt.listen_host, raw->port,
              raw->opt.display, raw->size.width, raw->size.height);
  return std::unique_ptr<RfbServer>(new RfbServer(std::move(impl)));
}

RfbServer::RfbServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RfbServer::~RfbServer() {
  impl_->stopping.store(true);
  uint64_t one = 1;
  (void)!::write(impl_->wake.get(), &one, sizeof(one));
  if (impl_->thread.joinable()) impl_->thread.join();
}

uint16_t RfbServer::port() const { return impl_->port; }

RfbStats RfbServer::stats() const {
  std::lock_guard lock(impl_->stats_mu);
  return impl_->stats;
}

}  // namespace cabin::vnc
