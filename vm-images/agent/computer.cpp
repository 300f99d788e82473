#include "vm-images/agent/computer.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "common/crypto.h"
#include "vnc/keys.h"

namespace cabin::agent {
namespace {

using json = nlohmann::json;
namespace cc = cabin::computer;

// Unpaced typing yields to the io_context this often, so 64 KiB of text does not starve it.
constexpr int kTypeYieldEvery = 32;
// Drags with few points get intermediate moves at most this far apart, so apps see motion.
constexpr double kDragStepPx = 20.0;
constexpr int kMaxDragSteps = 16;
constexpr size_t kDragInterpolateMaxPoints = 64;

net::awaitable<void> sleep_ms(int64_t ms) {
  if (ms <= 0) co_return;
  net::steady_timer timer(co_await net::this_coro::executor, std::chrono::milliseconds(ms));
  boost::system::error_code ec;
  co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
}

net::awaitable<void> yield_once() {
  co_await net::post(co_await net::this_coro::executor, net::use_awaitable);
}

vnc::Button to_vnc(cc::Button b) {
  switch (b) {
    case cc::Button::kLeft:
      return vnc::Button::kLeft;
    case cc::Button::kMiddle:
      return vnc::Button::kMiddle;
    case cc::Button::kRight:
      return vnc::Button::kRight;
    case cc::Button::kBack:
      return vnc::Button::kBack;
    case cc::Button::kForward:
      return vnc::Button::kForward;
  }
  return vnc::Button::kLeft;
}

vnc::Point to_vnc(const cc::Point& p) { return {static_cast<int>(p.x), static_cast<int>(p.y)}; }

Error unknown_key(const std::string& name) {
  return make_error(Errc::kInvalidArgument, "unknown_key",
                    "no X keysym for key name \"" + name + "\"");
}

// Normalized names to keysyms. A lone single character means the key that types it ("A" is
// shift+a); inside a chord a letter names its key, as xdotool reads it.
Result<vnc::KeyChord> resolve_keys(const std::vector<std::string>& names) {
  vnc::KeyChord chord;
  for (const std::string& n : names) {
    vnc::Keysym ks = 0;
    if (names.size() == 1) {
      auto cps = vnc::decode_utf8(n);
      if (cps && cps->size() == 1) ks = vnc::keysym_for_char((*cps)[0]);
    }
    if (ks == 0) ks = vnc::keysym_from_name(n);
    if (ks == 0) return unknown_key(n);
    chord.keys.push_back(ks);
  }
  return chord;
}

// Keys this executor holds down; whatever is still down is released when it goes away.
class HeldKeys {
 public:
  explicit HeldKeys(vnc::Input& in) : in_(in) {}
  HeldKeys(const HeldKeys&) = delete;
  HeldKeys& operator=(const HeldKeys&) = delete;
  ~HeldKeys() { (void)release(); }

  Result<void> down(vnc::Keysym ks) {
    if (auto r = in_.key_down(ks); !r) return r;
    down_.push_back(ks);
    return {};
  }
  Result<void> down(const std::vector<cc::Modifier>& mods) {
    for (cc::Modifier m : mods) {
      const vnc::Keysym ks = vnc::keysym_from_name(cc::modifier_name(m));
      if (ks == 0) return unknown_key(std::string(cc::modifier_name(m)));
      if (auto r = down(ks); !r) return r;
    }
    return {};
  }
  // Releases in reverse; every key is tried, the first error is returned.
  Result<void> release() {
    Result<void> first;
    while (!down_.empty()) {
      const vnc::Keysym ks = down_.back();
      down_.pop_back();
      if (auto r = in_.key_up(ks); !r && first.ok()) first = r;
    }
    return first;
  }

 private:
  vnc::Input& in_;
  std::vector<vnc::Keysym> down_;
};

// A mouse button held for a drag, let go if the drag fails midway.
class HeldButton {
 public:
  HeldButton(vnc::Input& in, vnc::Button b) : in_(in), b_(b) {}
  ~HeldButton() {
    if (down_) (void)in_.button_up(b_);
  }
  Result<void> down() {
    if (auto r = in_.button_down(b_); !r) return r;
    down_ = true;
    return {};
  }
  Result<void> up() {
    down_ = false;
    return in_.button_up(b_);
  }

 private:
  vnc::Input& in_;
  vnc::Button b_;
  bool down_ = false;
};

Result<void> move_if(vnc::Input& in, const std::optional<cc::Point>& at) {
  if (!at) return {};
  return in.move(to_vnc(*at));
}

Result<void> scroll_axis(vnc::Input& in, int64_t amount, cc::ScrollUnit unit,
                         vnc::ScrollDirection negative, vnc::ScrollDirection positive) {
  const int64_t n = scroll_notches(amount, unit);
  if (n == 0) return {};
  return in.scroll(amount < 0 ? negative : positive, static_cast<int>(n));
}

ShotSpec shot_spec(const cc::Screenshot& s) {
  ShotSpec spec;
  if (s.region) {
    spec.region = vnc::Rect{static_cast<int>(s.region->x), static_cast<int>(s.region->y),
                            static_cast<int>(s.region->width), static_cast<int>(s.region->height)};
  }
  if (s.size) {
    spec.size = vnc::Size{static_cast<int>(s.size->width), static_cast<int>(s.size->height)};
  }
  spec.format = s.format;
  return spec;
}

Result<void> drag(vnc::Input& in, const cc::Drag& d) {
  HeldKeys mods(in);
  if (auto r = mods.down(d.modifiers); !r) return r;
  if (auto r = in.move(to_vnc(d.path.front())); !r) return r;
  HeldButton button(in, to_vnc(d.button));
  if (auto r = button.down(); !r) return r;
  const bool interpolate = d.path.size() <= kDragInterpolateMaxPoints;
  for (size_t i = 1; i < d.path.size(); ++i) {
    const vnc::Point a = to_vnc(d.path[i - 1]);
    const vnc::Point b = to_vnc(d.path[i]);
    int steps = 1;
    if (interpolate) {
      const double len = std::hypot(b.x - a.x, b.y - a.y);
      steps = std::clamp(static_cast<int>(std::ceil(len / kDragStepPx)), 1, kMaxDragSteps);
    }
    for (int s = 1; s <= steps; ++s) {
      const vnc::Point p{a.x + (b.x - a.x) * s / steps, a.y + (b.y - a.y) * s / steps};
      if (auto r = in.move(p); !r) return r;
    }
  }
  if (auto r = button.up(); !r) return r;
  return mods.release();
}

net::awaitable<Result<void>> type_text(vnc::Input& in, const cc::TypeText& t) {
  auto text = vnc::decode_utf8(t.text);
  if (!text) co_return text.error();
  const std::u32string& cps = *text;
  for (char32_t cp : cps) {
    if (vnc::keysym_for_char(cp) == 0) {
      co_return make_error(Errc::kInvalidArgument, "bad_text",
                           "text holds a character that cannot be typed");
    }
  }
  int typed = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (cps[i] == U'\r' && i + 1 < cps.size() && cps[i + 1] == U'\n') continue;  // one Return
    if (typed > 0) {
      if (t.delay_ms > 0) {
        co_await sleep_ms(t.delay_ms);
      } else if (typed % kTypeYieldEvery == 0) {
        co_await yield_once();
      }
    }
    if (auto r = in.type_char(cps[i]); !r) co_return r;
    ++typed;
  }
  co_return Result<void>();
}

net::awaitable<Result<void>> hold(vnc::Input& in, const cc::Hold& h) {
  auto chord = resolve_keys(h.keys);
  if (!chord) co_return chord.error();
  HeldKeys keys(in);
  for (vnc::Keysym ks : chord->keys) {
    if (auto r = keys.down(ks); !r) co_return r;
  }
  co_await sleep_ms(h.duration_ms);
  co_return keys.release();
}

// One action; on success its result object.
net::awaitable<Result<json>> run_one(Desktop& desk, const cc::Action& action,
                                     const Uploader* upload) {
  vnc::Input& in = desk.input();
  json out = {{"op", cc::op_name(action)}};
  auto done = [&](Result<void> r) -> Result<json> {
    if (!r) return r.error();
    return out;
  };
  if (auto* a = std::get_if<cc::Move>(&action)) {
    HeldKeys mods(in);
    if (auto r = mods.down(a->modifiers); !r) co_return r.error();
    if (auto r = in.move(to_vnc(a->to)); !r) co_return r.error();
    co_return done(mods.release());
  }
  if (auto* a = std::get_if<cc::Click>(&action)) {
    if (auto r = move_if(in, a->at); !r) co_return r.error();
    HeldKeys mods(in);
    if (auto r = mods.down(a->modifiers); !r) co_return r.error();
    if (auto r = in.click(to_vnc(a->button), a->count); !r) co_return r.error();
    co_return done(mods.release());
  }
  if (auto* a = std::get_if<cc::MouseDown>(&action)) {
    if (auto r = move_if(in, a->at); !r) co_return r.error();
    co_return done(in.button_down(to_vnc(a->button)));
  }
  if (auto* a = std::get_if<cc::MouseUp>(&action)) {
    if (auto r = move_if(in, a->at); !r) co_return r.error();
    co_return done(in.button_up(to_vnc(a->button)));
  }
  if (auto* a = std::get_if<cc::Drag>(&action)) co_return done(drag(in, *a));
  if (auto* a = std::get_if<cc::Scroll>(&action)) {
    if (auto r = move_if(in, a->at); !r) co_return r.error();
    HeldKeys mods(in);
    if (auto r = mods.down(a->modifiers); !r) co_return r.error();
    if (auto r =
            scroll_axis(in, a->dy, a->unit, vnc::ScrollDirection::kUp, vnc::ScrollDirection::kDown);
        !r) {
      co_return r.error();
    }
    if (auto r = scroll_axis(in, a->dx, a->unit, vnc::ScrollDirection::kLeft,
                             vnc::ScrollDirection::kRight);
        !r) {
      co_return r.error();
    }
    co_return done(mods.release());
  }
  if (auto* a = std::get_if<cc::TypeText>(&action)) co_return done(co_await type_text(in, *a));
  if (auto* a = std::get_if<cc::Key>(&action)) {
    auto chord = resolve_keys(a->chord);
    if (!chord) co_return chord.error();
    co_return done(in.press(*chord));
  }
  if (auto* a = std::get_if<cc::Hold>(&action)) co_return done(co_await hold(in, *a));
  if (auto* a = std::get_if<cc::Wait>(&action)) {
    co_await sleep_ms(a->duration_ms);
    co_return out;
  }
  if (auto* a = std::get_if<cc::Screenshot>(&action)) {
    auto img = desk.screenshot(shot_spec(*a));
    if (!img) co_return img.error();
    json j = image_json(*img);
    j["op"] = "screenshot";
    co_return j;
  }
  if (auto* a = std::get_if<cc::Upload>(&action)) {
    if (!upload || !*upload)
      co_return make_error(Errc::kUnavailable, "no_browser", "this agent has no browser to fill");
    if (auto r = co_await (*upload)(*a); !r) co_return r.error();
    out["files"] = a->paths.size();
    co_return out;
  }
  if (std::holds_alternative<cc::CursorPosition>(action)) {
    auto p = in.pointer();
    if (!p) co_return p.error();
    out["x"] = p->x;
    out["y"] = p->y;
    co_return out;
  }
  co_return make_error(Errc::kInternal, "unsupported_action", "action not supported");
}

}  // namespace

int64_t scroll_notches(int64_t amount, computer::ScrollUnit unit) {
  const int64_t mag = amount < 0 ? -amount : amount;
  if (mag == 0) return 0;
  int64_t n = mag;
  if (unit == cc::ScrollUnit::kPixel) {
    n = std::max<int64_t>(1, (mag + kScrollPixelsPerNotch / 2) / kScrollPixelsPerNotch);
  }
  return std::min(n, computer::kMaxScrollNotches);
}

json image_json(const EncodedImage& img) {
  return {{"media_type", img.media_type},
          {"data", base64_encode(img.bytes)},
          {"width", img.width},
          {"height", img.height}};
}

net::awaitable<ComputerOutcome> run_computer(Desktop& desktop, const computer::Batch& batch,
                                             const Uploader* upload) {
  ComputerOutcome out;
  for (size_t i = 0; i < batch.actions.size(); ++i) {
    const cc::Action& action = batch.actions[i];
    // A lost X connection is reopened here or reported, never used half-closed.
    Result<json> r = json();
    if (auto o = desktop.open(); !o) {
      r = o.error();
    } else {
      r = co_await run_one(desktop, action, upload);
    }
    if (!r) {
      out.failure =
          ActionFailure{i, std::string(cc::op_name(action)), r.error().code, r.error().message};
      co_return out;
    }
    out.results.push_back(std::move(*r));
  }
  if (batch.screenshot_after) {
    // At the model's size when one was declared, like any whole-screen screenshot.
    ShotSpec spec;
    if (batch.model_size) {
      spec.size = vnc::Size{static_cast<int>(batch.model_size->width),
                            static_cast<int>(batch.model_size->height)};
    }
    auto img = desktop.screenshot(spec);
    if (!img) {
      out.failure = ActionFailure{batch.actions.size(), "screenshot_after", img.error().code,
                                  img.error().message};
      co_return out;
    }
    out.screenshot = image_json(*img);
  }
  co_return out;
}

json to_json(const ComputerOutcome& outcome) {
  json j = {{"results", outcome.results}};
  if (outcome.screenshot) j["screenshot"] = *outcome.screenshot;
  if (outcome.failure) {
    j["error"] = {{"index", outcome.failure->index},
                  {"op", outcome.failure->op},
                  {"code", outcome.failure->code},
                  {"message", outcome.failure->message}};
  }
  return j;
}

}  // namespace cabin::agent
