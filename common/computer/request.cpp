#include <utility>

#include "common/computer/detail.h"
#include "common/computer_actions.h"
#include "common/json_fields.h"

namespace cabin::computer {

using nlohmann::json;

namespace detail {

namespace {

// One action in any vocabulary; the discriminating field decides which ("op" first, so a Cabin
// op is never mistaken for the others).
Result<std::vector<Action>> parse_any(const json& o, const Ctx& c) {
  if (!o.is_object()) return invalid_field(c.self(), "must be an object");
  if (o.contains("op")) {
    CABIN_ASSIGN_OR_RETURN(Action a, parse_op(o, c));
    return std::vector<Action>{std::move(a)};
  }
  if (o.contains("action")) return parse_anthropic(o, c);
  if (o.contains("type")) return parse_openai(o, c);
  return invalid_field(c.self(),
                       "must have \"action\" (Anthropic), \"type\" (OpenAI) or \"op\" (Cabin)");
}

// Time an action keeps the batch busy on purpose (waits, holds, paced typing).
int64_t paced_ms(const Action& a) {
  if (auto* w = std::get_if<Wait>(&a)) return w->duration_ms;
  if (auto* h = std::get_if<Hold>(&a)) return h->duration_ms;
  if (auto* t = std::get_if<TypeText>(&a)) {
    return static_cast<int64_t>(utf8_chars(t->text)) * t->delay_ms;
  }
  return 0;
}

}  // namespace

Result<std::vector<Action>> parse_actions(const json& list, bool lone, const Limits& limits,
                                          const Scaler& scaler, ParseOne parse_one) {
  if (!list.is_array() || list.empty()) {
    return invalid_field("actions", "must be a non-empty array of actions");
  }
  if (list.size() > limits.max_actions) {
    return limit_error("actions", "has " + std::to_string(list.size()) + " actions; at most " +
                                      std::to_string(limits.max_actions) + " per batch");
  }
  std::vector<Action> out;
  int64_t waited = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    Ctx c{limits, scaler, lone ? "" : "actions[" + std::to_string(i) + "]."};
    CABIN_ASSIGN_OR_RETURN(std::vector<Action> parsed, parse_one(list[i], c));
    for (auto& a : parsed) {
      waited += paced_ms(a);
      if (waited > limits.max_batch_wait_ms) {
        return limit_error(
            c.self(), "the batch's waits add up to more than " + ms_text(limits.max_batch_wait_ms));
      }
      if (out.size() == limits.max_actions) {
        return limit_error(c.self(), "the batch expands to more than " +
                                         std::to_string(limits.max_actions) +
                                         " actions (each chord of a key sequence counts)");
      }
      out.push_back(std::move(a));
    }
  }
  return out;
}

}  // namespace detail

Result<Batch> parse_request(std::string_view body, const Limits& limits, ScreenSize screen,
                            std::optional<Size> default_model) {
  CABIN_ASSIGN_OR_RETURN(Scaler identity, detail::screen_scaler(screen));
  CABIN_ASSIGN_OR_RETURN(json j, parse_object(body));

  Batch batch;
  batch.model_size = default_model;
  const json* list = detail::find(j, "actions");
  if (list) {
    CABIN_TRY(reject_unknown(j, {"actions", "screenshot_after", "display"}));
    if (const json* v = detail::find(j, "screenshot_after")) {
      if (!v->is_boolean()) return invalid_field("screenshot_after", "must be true or false");
      batch.screenshot_after = v->get<bool>();
    }
    detail::Ctx top{limits, identity, ""};
    CABIN_ASSIGN_OR_RETURN(std::optional<Size> display, detail::read_size(j, "display", top));
    if (display) batch.model_size = *display;
  }
  Scaler scaler = identity;
  if (batch.model_size) {
    CABIN_ASSIGN_OR_RETURN(scaler, Scaler::make(*batch.model_size, screen));
  }
  CABIN_ASSIGN_OR_RETURN(
      batch.actions,
      list ? detail::parse_actions(*list, false, limits, scaler, detail::parse_any)
           : detail::parse_actions(json::array({j}), true, limits, scaler, detail::parse_any));
  // A whole-screen screenshot comes back in the model's space, the one its coordinates use.
  if (!scaler.is_identity()) {
    for (auto& a : batch.actions) {
      auto* s = std::get_if<Screenshot>(&a);
      if (s && !s->region && !s->size) s->size = scaler.model();
    }
  }
  return batch;
}

}  // namespace cabin::computer
