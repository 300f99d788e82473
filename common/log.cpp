#include "common/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <atomic>
#include <cctype>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/clock.h"

namespace cabin {
namespace {

std::atomic<bool> json_lines{false};

// The first session id (ses_ and 20 of [a-z0-9]) in a message, or "".
std::string_view session_in(std::string_view text) {
  for (size_t at = text.find("ses_"); at != std::string_view::npos;
       at = text.find("ses_", at + 1)) {
    if (at + 24 > text.size()) break;
    const auto id = text.substr(at, 24);
    bool ok = true;
    for (char c : id.substr(4))
      ok = ok && (std::islower(static_cast<unsigned char>(c)) ||
                  std::isdigit(static_cast<unsigned char>(c)));
    const bool ends =
        at + 24 == text.size() || !std::isalnum(static_cast<unsigned char>(text[at + 24]));
    if (ok && ends) return id;
  }
  return {};
}

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string_view text(msg.payload.data(), msg.payload.size());
    const auto level = spdlog::level::to_string_view(msg.level);
    nlohmann::ordered_json line = {
        {"time", format_rfc3339_ms(msg.time)},
        {"level", std::string(level.data(), level.size())},
        {"component", std::string(msg.logger_name.data(), msg.logger_name.size())},
        {"message", std::string(text)}};
    if (auto id = session_in(text); !id.empty()) line["session"] = std::string(id);
    // A sandbox's output is relayed as it came: bytes that are not UTF-8 are replaced.
    const std::string out =
        line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    dest.append(out.data(), out.data() + out.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

void use_format(spdlog::logger& l) {
  if (json_lines) {
    l.set_formatter(std::make_unique<JsonFormatter>());
  } else {
    l.set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  }
}

}  // namespace

std::shared_ptr<spdlog::logger> logger(const std::string& component) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (auto l = spdlog::get(component)) return l;
  auto l = spdlog::stderr_color_mt(component);
  use_format(*l);
  l->set_level(spdlog::get_level());
  return l;
}

void set_log_json() {
  json_lines = true;
  spdlog::apply_all([](std::shared_ptr<spdlog::logger> l) { use_format(*l); });
}

void set_log_level(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  spdlog::set_level(lvl);
  spdlog::apply_all([lvl](std::shared_ptr<spdlog::logger> l) { l->set_level(lvl); });
}

}  // namespace cabin
