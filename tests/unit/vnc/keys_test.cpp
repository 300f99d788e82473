// Key names, chords and characters to keysyms; UTF-8 decoding.
#include "vnc/keys.h"

#include <X11/keysym.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace cabin::vnc;

TEST_CASE("xdotool chords parse into keysyms in press order", "[keys]") {
  auto c = parse_chord("ctrl+shift+t");
  REQUIRE(c.ok());
  CHECK(c->keys == std::vector<Keysym>{XK_Control_L, XK_Shift_L, XK_t});
  CHECK(parse_chord("Return")->keys == std::vector<Keysym>{XK_Return});
  CHECK(parse_chord("super+l")->keys == std::vector<Keysym>{XK_Super_L, XK_l});
  CHECK(parse_chord("alt+F4")->keys == std::vector<Keysym>{XK_Alt_L, XK_F4});
  CHECK(parse_chord("ctrl+alt+Delete")->keys ==
        std::vector<Keysym>{XK_Control_L, XK_Alt_L, XK_Delete});
  CHECK(parse_chord("KP_Enter")->keys == std::vector<Keysym>{XK_KP_Enter});
  CHECK(parse_chord("XF86AudioMute")->keys == std::vector<Keysym>{0x1008FF12});
  CHECK(parse_chord("ctrl+plus")->keys == std::vector<Keysym>{XK_Control_L, XK_plus});
  CHECK(parse_chord("ctrl++")->keys == std::vector<Keysym>{XK_Control_L, XK_plus});
  CHECK(parse_chord("+")->keys == std::vector<Keysym>{XK_plus});
  CHECK(parse_chord("ctrl+T")->keys == std::vector<Keysym>{XK_Control_L, XK_t});
  CHECK(parse_chord("shift+ä")->keys == std::vector<Keysym>{XK_Shift_L, XK_adiaeresis});
}

TEST_CASE("malformed chords are rejected", "[keys]") {
  CHECK_FALSE(parse_chord("").ok());
  CHECK_FALSE(parse_chord("ctrl+").ok());
  CHECK_FALSE(parse_chord("ctrl++shift").ok());
  CHECK_FALSE(parse_chord("+a").ok());
  CHECK_FALSE(parse_chord("ctrl+nosuchkey").ok());
  CHECK(parse_chord("ctrl+nosuchkey").error().code == "bad_key");
  CHECK_FALSE(parse_chord("ctrl+\x01").ok());
}

TEST_CASE("chord sequences split on whitespace", "[keys]") {
  auto seq = parse_chord_sequence("  ctrl+a  Delete ");
  REQUIRE(seq.ok());
  REQUIRE(seq->size() == 2);
  CHECK((*seq)[0].keys == std::vector<Keysym>{XK_Control_L, XK_a});
  CHECK((*seq)[1].keys == std::vector<Keysym>{XK_Delete});
  CHECK_FALSE(parse_chord_sequence("   ").ok());
}

TEST_CASE("OpenAI-style name lists map to keysyms", "[keys]") {
  const std::vector<std::string> ctrl_l = {"CTRL", "L"};
  CHECK(parse_key_names(ctrl_l)->keys == std::vector<Keysym>{XK_Control_L, XK_l});
  struct Case {
    const char* name;
    Keysym ks;
  };
  const Case cases[] = {
      {"CTRL", XK_Control_L},
      {"ALT", XK_Alt_L},
      {"SHIFT", XK_Shift_L},
      {"CMD", XK_Super_L},
      {"META", XK_Super_L},
      {"SUPER", XK_Super_L},
      {"ENTER", XK_Return},
      {"ESC", XK_Escape},
      {"TAB", XK_Tab},
      {"BACKSPACE", XK_BackSpace},
      {"DELETE", XK_Delete},
      {"ARROWUP", XK_Up},
      {"ARROWDOWN", XK_Down},
      {"ARROWLEFT", XK_Left},
      {"ARROWRIGHT", XK_Right},
      {"PAGEUP", XK_Prior},
      {"PAGEDOWN", XK_Next},
      {"HOME", XK_Home},
      {"END", XK_End},
      {"SPACE", XK_space},
      {"F1", XK_F1},
      {"F12", XK_F12},
      {"f5", XK_F5},
      {"Page_Down", XK_Next},
      {"arrow_left", XK_Left},
      {"a", XK_a},
      {"Z", XK_z},
      {"7", XK_7},
      {"/", XK_slash},
      {" ", XK_space},
      {"ß", XK_ssharp},
      {"€", 0x010020AC},
      {"escape", XK_Escape},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    CHECK(keysym_from_name(c.name) == c.ks);
  }
  CHECK(keysym_from_name("F0") == 0);
  CHECK(keysym_from_name("F36") == 0);
  CHECK(keysym_from_name("") == 0);
  const std::vector<std::string> bad = {"CTRL", "NOPE"};
  CHECK_FALSE(parse_key_names(bad).ok());
  CHECK_FALSE(parse_key_names({}).ok());
}

TEST_CASE("characters map to the keysyms that type them and back", "[keys]") {
  CHECK(keysym_for_char(U'a') == XK_a);
  CHECK(keysym_for_char(U'A') == XK_A);
  CHECK(keysym_for_char(U' ') == XK_space);
  CHECK(keysym_for_char(U'~') == XK_asciitilde);
  CHECK(keysym_for_char(U'ß') == XK_ssharp);
  CHECK(keysym_for_char(U'ä') == XK_adiaeresis);
  CHECK(keysym_for_char(U'Ü') == XK_Udiaeresis);
  CHECK(keysym_for_char(U'\u00A0') == XK_nobreakspace);
  CHECK(keysym_for_char(U'\n') == XK_Return);
  CHECK(keysym_for_char(U'\r') == XK_Return);
  CHECK(keysym_for_char(U'\t') == XK_Tab);
  CHECK(keysym_for_char(U'日') == 0x010065E5);
  CHECK(keysym_for_char(U'\U0001F642') == 0x0101F642);
  CHECK(keysym_for_char(U'€') == 0x010020AC);
  CHECK(keysym_for_char(0x01) == 0);
  CHECK(keysym_for_char(0x7F) == 0);
  CHECK(keysym_for_char(0x85) == 0);
  CHECK(keysym_for_char(0xFFFE) == 0);
  CHECK(keysym_for_char(0xD800) == 0);
  CHECK(keysym_for_char(0x110000) == 0);
  for (char32_t cp : std::u32string(U"aZ~ßäÜ日€\U0001F642\n\t")) {
    CHECK(char_for_keysym(keysym_for_char(cp)) == cp);
  }
  CHECK(char_for_keysym(XK_Shift_L) == 0);
  CHECK(is_modifier_keysym(XK_Shift_L));
  CHECK(is_modifier_keysym(XK_Super_L));
  CHECK(is_modifier_keysym(XK_ISO_Level3_Shift));
  CHECK_FALSE(is_modifier_keysym(XK_a));
  CHECK_FALSE(is_modifier_keysym(XK_Return));
}

TEST_CASE("UTF-8 decoding is strict", "[keys]") {
  auto ok = decode_utf8("Grüße ß 日本語 🙂");
  REQUIRE(ok.ok());
  CHECK(*ok == U"Grüße ß 日本語 🙂");
  CHECK(decode_utf8("")->empty());
  CHECK_FALSE(decode_utf8("\xC3").ok());              // truncated
  CHECK_FALSE(decode_utf8("\xC0\xAF").ok());          // overlong '/'
  CHECK_FALSE(decode_utf8("\xED\xA0\x80").ok());      // surrogate
  CHECK_FALSE(decode_utf8("\xF4\x90\x80\x80").ok());  // past U+10FFFF
  CHECK_FALSE(decode_utf8("\x80").ok());              // stray continuation
  CHECK_FALSE(decode_utf8("a\xE6\x97").ok());         // truncated at the end
}
