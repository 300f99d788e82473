#include <algorithm>
#include <utility>

#include "common/computer/detail.h"
#include "common/computer_actions.h"

namespace cabin::computer {

using detail::in_quotes;

Result<std::string> normalize_key(std::string_view name) {
  auto bad = [](std::string why) {
    return make_error(Errc::kInvalidArgument, "invalid_request", std::move(why));
  };
  if (name.empty()) return bad("a key name is empty");
  if (name.size() > kMaxKeyNameBytes) {
    return bad("key name " + in_quotes(name) + " is longer than " +
               std::to_string(kMaxKeyNameBytes) + " bytes");
  }
  for (unsigned char ch : name) {
    if (ch < 0x20 || ch == 0x7f) return bad("a key name contains a control character");
  }
  // One character, e.g. "a", "A", "é", "+": the agent presses whatever types it.
  unsigned char lead = static_cast<unsigned char>(name[0]);
  size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
  if (len == name.size()) {
    bool cont = true;
    for (size_t i = 1; i < len; ++i) cont = cont && (name[i] & 0xC0) == 0x80;
    if (cont) return name == " " ? std::string("space") : std::string(name);
  }
  // Aliases compare without case, '_' or '-', so CTRL, Page_Up and ARROW-LEFT all match.
  std::string folded;
  for (char ch : name) {
    if (ch == '_' || ch == '-') continue;
    folded += static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  }
  struct Alias {
    std::string_view from;
    std::string_view to;
  };
  // clang-format off
  static constexpr Alias kAliases[] = {
      {"ctrl", "ctrl"}, {"control", "ctrl"}, {"ctl", "ctrl"},
      {"alt", "alt"}, {"option", "alt"}, {"opt", "alt"},
      {"shift", "shift"},
      {"super", "super"}, {"cmd", "super"}, {"command", "super"}, {"meta", "super"},
      {"win", "super"}, {"windows", "super"},
      {"enter", "Return"}, {"return", "Return"},
      {"esc", "Escape"}, {"escape", "Escape"},
      {"tab", "Tab"}, {"space", "space"}, {"backspace", "BackSpace"},
      {"delete", "Delete"}, {"del", "Delete"}, {"insert", "Insert"}, {"ins", "Insert"},
      {"home", "Home"}, {"end", "End"},
      {"pageup", "Prior"}, {"pgup", "Prior"}, {"prior", "Prior"},
      {"pagedown", "Next"}, {"pgdn", "Next"}, {"next", "Next"},
      {"arrowleft", "Left"}, {"left", "Left"}, {"arrowright", "Right"}, {"right", "Right"},
      {"arrowup", "Up"}, {"up", "Up"}, {"arrowdown", "Down"}, {"down", "Down"},
      {"capslock", "Caps_Lock"}, {"numlock", "Num_Lock"}, {"scrolllock", "Scroll_Lock"},
      {"printscreen", "Print"}, {"print", "Print"}, {"pause", "Pause"},
      {"menu", "Menu"}, {"contextmenu", "Menu"},
  };
  // clang-format on
  for (const auto& a : kAliases) {
    if (folded == a.from) return std::string(a.to);
  }
  // Function keys F1..F35, the range X has keysyms for.
  if (folded.size() >= 2 && folded.size() <= 3 && folded[0] == 'f' && folded[1] >= '1' &&
      folded[1] <= '9') {
    int n = folded[1] - '0';
    bool digits = true;
    if (folded.size() == 3) {
      digits = folded[2] >= '0' && folded[2] <= '9';
      n = n * 10 + (folded[2] - '0');
    }
    if (digits && n <= 35) return "F" + std::to_string(n);
  }
  // Anything else must look like a keysym name; the agent decides whether it is one.
  for (char ch : name) {
    bool word = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                ch == '_';
    if (!word) return bad(in_quotes(name) + " is not a key name");
  }
  return std::string(name);
}

Result<std::vector<std::string>> parse_chord(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return make_error(Errc::kInvalidArgument, "invalid_request", in_quotes(text) + " " + why);
  };
  if (text.empty()) return bad("names no key");
  std::vector<std::string> keys;
  size_t i = 0;
  while (true) {
    if (i >= text.size()) return bad("ends with '+'");
    // A '+' where a key is expected is the plus key itself ("ctrl++").
    size_t end = text[i] == '+' ? i + 1 : std::min(text.find('+', i), text.size());
    if (end < text.size() && text[end] != '+') return bad("is not a chord like \"ctrl+shift+t\"");
    CABIN_ASSIGN_OR_RETURN(std::string k, normalize_key(text.substr(i, end - i)));
    if (keys.size() == kMaxChordKeys) {
      return bad("has more than " + std::to_string(kMaxChordKeys) + " keys");
    }
    keys.push_back(std::move(k));
    if (end == text.size()) break;
    i = end + 1;
  }
  return keys;
}

}  // namespace cabin::computer
