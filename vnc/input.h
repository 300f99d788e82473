// Input: pointer, wheel and keyboard events through XTest, including exact Unicode typing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "common/result.h"
#include "vnc/display.h"
#include "vnc/image.h"
#include "vnc/keys.h"

namespace cabin::vnc {

enum class Button : uint8_t { kLeft = 1, kMiddle = 2, kRight = 3, kBack = 8, kForward = 9 };

enum class ScrollDirection : uint8_t { kUp, kDown, kLeft, kRight };  // X buttons 4, 5, 6, 7

struct InputOptions {
  // Unused keycodes borrowed for characters the keyboard layout lacks. A borrowed keycode keeps
  // its character until it is the least recently used one and another character needs a slot;
  // all of them are given back when the Input is destroyed. Before a borrowed keycode is
  // remapped under a press the focused client may not have read yet, and before a remapped one
  // is pressed, the Input waits for that client to catch up (a _NET_WM_PING round trip), so
  // each key is decoded with the mapping it was typed with.
  int max_spare_keycodes = 48;
};

// Every call is synchronous: when it returns, the X server has processed the events (so a
// screenshot taken next shows their effect) and any X error is returned.
//
// Keys and buttons a call presses, it releases before returning, also when it fails midway.
// Only key_down/button_down leave something down, on purpose; release_all() (and the destructor)
// let go of those.
class Input {
 public:
  static Result<Input> create(Display& display, InputOptions options = {});

  Input(Input&&) noexcept;
  Input& operator=(Input&&) noexcept;
  ~Input();

  // Absolute pointer position in screen pixels; must lie on the screen.
  Result<void> move(Point p);
  // Where the pointer is now (XQueryPointer on the root window), in screen pixels.
  Result<Point> pointer();
  Result<void> button_down(Button b);
  Result<void> button_up(Button b);
  // `count` presses in a row (2 = double click), at the current position. 1..3.
  Result<void> click(Button b, int count = 1);
  // One wheel button press+release per notch. 0..100 notches.
  Result<void> scroll(ScrollDirection direction, int notches);

  // A key by keysym, left down until key_up (holding a key for a while). Presses the key that
  // carries the keysym and nothing else: Shift is not added for shifted symbols.
  Result<void> key_down(Keysym keysym);
  // A key by keysym as a VNC client sends it: the press types what `keysym` says whatever Shift,
  // Caps Lock and Num Lock are doing. A keysym on the shifted level of its key gets Shift pressed
  // around the key's press when no Shift is down ("A" alone types "A"); a character on the
  // unshifted level gets the Shift keys that are down lifted around the press, when no other
  // modifier is down (Shift, "a" types "a"; Shift+Tab, Shift+arrows and Ctrl+Shift shortcuts are
  // left as they are). Only the key stays down until key_up, so keys that overlap while typing
  // fast each get their own Shift state, and a repeated key_down (auto-repeat) types the same
  // character again.
  Result<void> key_down_exact(Keysym keysym);
  Result<void> key_up(Keysym keysym);
  // Presses the chord's keys in order and releases them in reverse. A main key that sits on the
  // shifted level of its key ("ctrl+plus" on a US layout) gets Shift added.
  Result<void> press(const KeyChord& chord);

  // Types `utf8` exactly, whatever the keyboard layout: '\n' (and "\r\n") is Return, '\t' is Tab,
  // other control characters are rejected before anything is typed. Modifier keys that are down
  // (and Caps Lock) are lifted for the duration and put back afterwards. A non-zero
  // `per_key_delay` blocks this thread between characters: callers on an event loop should call
  // type_char() from a timer instead.
  Result<void> type_text(std::string_view utf8,
                         std::chrono::microseconds per_key_delay = std::chrono::microseconds(0));
  Result<void> type_char(char32_t cp);

  // Releases every key and button this Input left down.
  Result<void> release_all();

 private:
  struct Impl;
  explicit Input(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cabin::vnc
