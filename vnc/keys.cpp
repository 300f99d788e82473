#include "vnc/keys.h"

#include <X11/Xlib.h>
#include <X11/keysym.h>

#include <cctype>
#include <string>
#include <utility>

namespace cabin::vnc {
namespace {

// Lower case, without '_', '-' and spaces: "Page_Down", "PAGEDOWN", "page-down" all match.
std::string normalize(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '_' || c == '-' || c == ' ') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

// Names agents and people use, normalized. Everything else goes through XStringToKeysym.
constexpr std::pair<std::string_view, Keysym> kAliases[] = {
    {"ctrl", XK_Control_L},
    {"control", XK_Control_L},
    {"lctrl", XK_Control_L},
    {"ctrll", XK_Control_L},
    {"ctrlr", XK_Control_R},
    {"rctrl", XK_Control_R},
    {"controlr", XK_Control_R},
    {"shift", XK_Shift_L},
    {"lshift", XK_Shift_L},
    {"shiftl", XK_Shift_L},
    {"shiftr", XK_Shift_R},
    {"rshift", XK_Shift_R},
    {"alt", XK_Alt_L},
    {"lalt", XK_Alt_L},
    {"altl", XK_Alt_L},
    {"option", XK_Alt_L},
    {"opt", XK_Alt_L},
    {"altr", XK_Alt_R},
    {"ralt", XK_Alt_R},
    {"altgr", XK_ISO_Level3_Shift},
    // Linux has no Cmd key; Chromium on X11 reads Super as its Meta key.
    {"super", XK_Super_L},
    {"superl", XK_Super_L},
    {"superr", XK_Super_R},
    {"cmd", XK_Super_L},
    {"command", XK_Super_L},
    {"meta", XK_Super_L},
    {"win", XK_Super_L},
    {"windows", XK_Super_L},
    {"os", XK_Super_L},
    {"enter", XK_Return},
    {"return", XK_Return},
    {"kpenter", XK_KP_Enter},
    {"esc", XK_Escape},
    {"escape", XK_Escape},
    {"tab", XK_Tab},
    {"backspace", XK_BackSpace},
    {"bksp", XK_BackSpace},
    {"delete", XK_Delete},
    {"del", XK_Delete},
    {"insert", XK_Insert},
    {"ins", XK_Insert},
    {"up", XK_Up},
    {"arrowup", XK_Up},
    {"down", XK_Down},
    {"arrowdown", XK_Down},
    {"left", XK_Left},
    {"arrowleft", XK_Left},
    {"right", XK_Right},
    {"arrowright", XK_Right},
    {"pageup", XK_Prior},
    {"pgup", XK_Prior},
    {"prior", XK_Prior},
    {"pagedown", XK_Next},
    {"pgdn", XK_Next},
    {"next", XK_Next},
    {"home", XK_Home},
    {"end", XK_End},
    {"space", XK_space},
    {"spacebar", XK_space},
    {"capslock", XK_Caps_Lock},
    {"numlock", XK_Num_Lock},
    {"scrolllock", XK_Scroll_Lock},
    {"print", XK_Print},
    {"printscreen", XK_Print},
    {"prtsc", XK_Print},
    {"pause", XK_Pause},
    {"break", XK_Break},
    {"menu", XK_Menu},
    {"contextmenu", XK_Menu},
    {"apps", XK_Menu},
    {"plus", XK_plus},
    {"minus", XK_minus},
    {"equal", XK_equal},
    {"equals", XK_equal},
    {"comma", XK_comma},
    {"period", XK_period},
    {"slash", XK_slash},
    {"backslash", XK_backslash},
    {"semicolon", XK_semicolon},
    {"quote", XK_apostrophe},
    {"backquote", XK_grave},
    {"grave", XK_grave},
};

// Decodes one code point at s[i], advancing i; returns U+FFFFFFFF on malformed input.
char32_t next_utf8(std::string_view s, size_t& i) {
  constexpr char32_t kBad = 0xFFFFFFFF;
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 1, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 2, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 3, cp = b0 & 0x07, min = 0x10000;
  } else {
    return kBad;
  }
  if (i + n >= s.size()) return kBad;  // truncated
  for (int k = 1; k <= n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return kBad;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kBad;
  i += n + 1;
  return cp;
}

}  // namespace

Result<std::u32string> decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const char32_t cp = next_utf8(text, i);
    if (cp == 0xFFFFFFFF) {
      return make_error(Errc::kInvalidArgument, "bad_utf8",
                        "text is not valid UTF-8 (byte " + std::to_string(i) + ")");
    }
    out.push_back(cp);
  }
  return out;
}

Keysym keysym_for_char(char32_t cp) {
  if (cp == U'\n' || cp == U'\r') return XK_Return;
  if (cp == U'\t') return XK_Tab;
  if ((cp >= 0x20 && cp <= 0x7E) || (cp >= 0xA0 && cp <= 0xFF)) return cp;
  if (cp < 0x100) return 0;  // C0/C1 controls, DEL
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  if ((cp & 0xFFFE) == 0xFFFE || (cp >= 0xFDD0 && cp <= 0xFDEF)) return 0;  // non-characters
  return 0x01000000 | cp;
}

char32_t char_for_keysym(Keysym keysym) {
  if (keysym == XK_Return || keysym == XK_KP_Enter) return U'\n';
  if (keysym == XK_Tab) return U'\t';
  if ((keysym >= 0x20 && keysym <= 0x7E) || (keysym >= 0xA0 && keysym <= 0xFF)) return keysym;
  if (keysym >= 0x01000100 && keysym <= 0x0110FFFF) return keysym - 0x01000000;
  return 0;
}

bool is_modifier_keysym(Keysym k) {
  return (k >= XK_Shift_L && k <= XK_Hyper_R) || k == XK_ISO_Level3_Shift ||
         k == XK_ISO_Level5_Shift || k == XK_Mode_switch || k == XK_Num_Lock;
}

Keysym keysym_from_name(std::string_view name) {
  if (name.empty()) return 0;
  // One character (which may be several UTF-8 bytes).
  if (auto cps = decode_utf8(name); cps.ok() && cps->size() == 1) {
    char32_t cp = (*cps)[0];
    if (cp >= U'A' && cp <= U'Z') cp = cp - U'A' + U'a';
    if (cp == U'\n' || cp == U'\t' || cp == U'\r') return keysym_for_char(cp);
    if (cp > 0x20) return keysym_for_char(cp);
    if (cp == U' ') return XK_space;
    return 0;
  }
  const std::string norm = normalize(name);
  for (const auto& [alias, ks] : kAliases) {
    if (alias == norm) return ks;
  }
  // F1..F35 in any case.
  if (norm.size() >= 2 && norm[0] == 'f' && norm.find_first_not_of("0123456789", 1) == norm.npos) {
    const int n = std::stoi(norm.substr(1));
    if (n >= 1 && n <= 35) return XK_F1 + (n - 1);
    return 0;
  }
  // XStringToKeysym is a table lookup in libX11; it needs no connection.
  const std::string exact(name);
  const KeySym ks = XStringToKeysym(exact.c_str());
  return ks == NoSymbol ? 0 : static_cast<Keysym>(ks);
}

Result<KeyChord> parse_key_names(std::span<const std::string> names) {
  if (names.empty()) {
    return make_error(Errc::kInvalidArgument, "bad_key", "no keys given");
  }
  if (names.size() > 16) {
    return make_error(Errc::kInvalidArgument, "bad_key", "too many keys in one chord");
  }
  KeyChord chord;
  for (const std::string& n : names) {
    const Keysym ks = keysym_from_name(n);
    if (ks == 0) return make_error(Errc::kInvalidArgument, "bad_key", "unknown key name: " + n);
    chord.keys.push_back(ks);
  }
  return chord;
}

Result<KeyChord> parse_chord(std::string_view text) {
  if (text.empty()) return make_error(Errc::kInvalidArgument, "bad_key", "empty key chord");
  // The plus key itself: a lone "+" or a chord ending in "++" ("ctrl++").
  bool plus_key = false;
  if (text == "+") {
    plus_key = true;
    text = {};
  } else if (text.size() > 2 && text.ends_with("++")) {
    plus_key = true;
    text.remove_suffix(2);
  }
  std::vector<std::string> parts;
  size_t start = 0;
  while (!text.empty()) {
    const size_t plus = text.find('+', start);
    const std::string_view part = text.substr(start, plus == text.npos ? plus : plus - start);
    if (part.empty()) {
      return make_error(Errc::kInvalidArgument, "bad_key",
                        "empty key name in chord: " + std::string(text));
    }
    parts.emplace_back(part);
    if (plus == text.npos) break;
    start = plus + 1;
  }
  if (plus_key) parts.emplace_back("plus");
  return parse_key_names(parts);
}

Result<std::vector<KeyChord>> parse_chord_sequence(std::string_view text) {
  std::vector<KeyChord> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) {
      auto chord = parse_chord(text.substr(i, j - i));
      if (!chord) return chord.error();
      out.push_back(std::move(*chord));
      if (out.size() > 64) {
        return make_error(Errc::kInvalidArgument, "bad_key", "too many chords in one sequence");
      }
    }
    i = j;
  }
  if (out.empty()) return make_error(Errc::kInvalidArgument, "bad_key", "empty key sequence");
  return out;
}

}  // namespace cabin::vnc
