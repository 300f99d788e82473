// Key names, chords and characters to X keysyms: pure functions, no X connection needed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace cabin::vnc {

// An X keysym (X11/keysymdef.h). Unicode code point U+XXXX without a legacy keysym is
// 0x01000000 + XXXX.
using Keysym = uint32_t;

// Keys pressed in order and released in reverse: modifiers first, then the main key.
struct KeyChord {
  std::vector<Keysym> keys;
  friend bool operator==(const KeyChord&, const KeyChord&) = default;
};

// One key name to its keysym, or 0 when unknown. Accepts, case-insensitively and ignoring '_'
// and '-': modifier words (ctrl/control, alt/option, shift, super/cmd/command/meta/win,
// altgr), the OpenAI/Anthropic names (ENTER, ESC, BACKSPACE, ARROWUP, PAGEDOWN, SPACE, F1..F24,
// ...); then exact X keysym names as xdotool does ("Return", "KP_Enter", "XF86AudioMute",
// "adiaeresis"); then a single character. A single ASCII letter means its key, so "L" and "l"
// both give XK_l: shifted letters in chords are spelled with "shift".
Keysym keysym_from_name(std::string_view name);

// xdotool syntax: "ctrl+shift+t", "Return", "super+l", "alt+F4", "ctrl+plus". A trailing "+"
// names the plus key ("ctrl++").
Result<KeyChord> parse_chord(std::string_view text);

// Space-separated chords, as xdotool's key command takes them: "ctrl+a Delete".
Result<std::vector<KeyChord>> parse_chord_sequence(std::string_view text);

// A list of names pressed together, as OpenAI's keypress action sends: {"CTRL", "L"}.
Result<KeyChord> parse_key_names(std::span<const std::string> names);

// The keysym that types `cp`: Latin-1 printable characters are their own keysyms, '\n' and '\r'
// are Return, '\t' is Tab, everything else from U+0100 up is 0x01000000 + cp. Returns 0 for
// control characters and non-characters, which cannot be typed.
Keysym keysym_for_char(char32_t cp);

// The reverse, for keysyms keysym_for_char produces (and Unicode keysyms in general); 0 if none.
char32_t char_for_keysym(Keysym keysym);

// True for Shift, Control, Alt, Meta, Super, Hyper, AltGr and the lock keys.
bool is_modifier_keysym(Keysym keysym);

// Strict UTF-8: rejects overlong forms, surrogates, code points past U+10FFFF, truncation.
Result<std::u32string> decode_utf8(std::string_view text);

}  // namespace cabin::vnc
