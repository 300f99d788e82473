// Internal to common/computer/: the field readers and parsers the vocabulary files share.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/computer_actions.h"
#include "common/result.h"

namespace cabin::computer::detail {

// --- text for error messages ---

Error limit_error(const std::string& field, const std::string& why);
std::string size_text(Size s);
std::string ms_text(int64_t ms);
// At most 64 bytes of s, quoted, so a huge value cannot bloat the message.
std::string in_quotes(std::string_view s);
size_t utf8_chars(std::string_view s);

// --- JSON values ---

const nlohmann::json* find(const nlohmann::json& o, const char* key);
// An integer JSON value as int64; unsigned values past INT64_MAX saturate, which every range
// check then rejects.
int64_t int_of(const nlohmann::json& v);
// A string value's text, "" for any other type; a view into v, so v must outlive it.
std::string_view string_or_empty(const nlohmann::json& v);

// What one action is parsed against: the limits, the coordinate mapping, and the prefix that
// names its fields in errors ("actions[3]." in a batch, "" for a lone action).
struct Ctx {
  const Limits& limits;
  const Scaler& scaler;
  std::string prefix;
  std::string f(std::string_view field) const { return prefix + std::string(field); }
  std::string self() const {
    return prefix.empty() ? std::string("action") : prefix.substr(0, prefix.size() - 1);
  }
};

Result<int64_t> int_field(const nlohmann::json& v, const std::string& field);
Result<const nlohmann::json*> required(const nlohmann::json& o, const char* key, const Ctx& c);

// --- points, in the model's space, returned in screen pixels ---

// [x, y] (Anthropic's coordinate, the superset's drag points).
Result<Point> read_pair(const nlohmann::json& v, const std::string& field, const Ctx& c);
// {x, y} given together (OpenAI and superset); absent is an error only when required.
Result<std::optional<Point>> read_xy(const nlohmann::json& o, const Ctx& c, bool is_required,
                                     const char* xk = "x", const char* yk = "y");

// --- keys, modifiers, buttons ---

std::optional<Modifier> modifier_of(std::string_view normalized);
// Adds the modifier that name normalizes to, once; anything else is an error on field.
Result<void> add_modifier(std::vector<Modifier>& mods, std::string_view name,
                          const std::string& field);
// The superset's "modifiers" and OpenAI's "keys" held during a pointer action; OpenAI may send
// null for none.
Result<std::vector<Modifier>> modifiers_from_array(const nlohmann::json& o, const char* key,
                                                   const Ctx& c, bool allow_null);
// A list of key names pressed together (superset "chord"/"keys", OpenAI "keys").
Result<std::vector<std::string>> key_array(const nlohmann::json& v, const std::string& field);
std::optional<Button> button_of(std::string_view s);

// --- amounts and text ---

// Typed text: bounded, and free of control characters other than tab and newlines.
Result<std::string> read_text(const nlohmann::json& o, const Ctx& c);
// A scroll amount on one axis; pixel amounts are also checked once scaled to the screen, so
// the agent's own check of what cabind sends always passes.
Result<int64_t> read_scroll(const nlohmann::json& v, const std::string& field, ScrollUnit unit,
                            bool x_axis, const Ctx& c);
// An optional {width, height}, each 1..kMaxScreenDim.
Result<std::optional<Size>> read_size(const nlohmann::json& o, const char* key, const Ctx& c);

// --- the vocabularies and batches ---

Result<std::vector<Action>> parse_anthropic(const nlohmann::json& o, const Ctx& c);
Result<std::vector<Action>> parse_openai(const nlohmann::json& o, const Ctx& c);
// One superset op; o is an object with "op".
Result<Action> parse_op(const nlohmann::json& o, const Ctx& c);

using ParseOne = Result<std::vector<Action>> (*)(const nlohmann::json& o, const Ctx& c);
// Parses a batch's actions (or one lone action) and enforces the batch-wide limits.
Result<std::vector<Action>> parse_actions(const nlohmann::json& list, bool lone,
                                          const Limits& limits, const Scaler& scaler,
                                          ParseOne parse_one);

// The identity mapping for a screen; an invalid screen size is cabind's fault, not the client's.
Result<Scaler> screen_scaler(Size screen);

}  // namespace cabin::computer::detail
