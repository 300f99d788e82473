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

// The first session id ("ses_", an optional "<node>_", 20 of [a-z0-9]) in a message, or "".
std::string_view session_in(std::string_view text) {
  auto alnum = [](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c));
  };
  for (size_t at = text.find("ses_"); at != std::string_view::npos;
       at = text.find("ses_", at + 1)) {
    size_t end = at + 4;
    while (end < text.size() && (alnum(text[end]) || text[end] == '_') && end - at <= 41) ++end;
    const auto id = text.substr(at, end - at);
    const size_t sep = id.find('_', 4);
    const size_t node = sep == std::string_view::npos ? 0 : sep - 4;
    const bool ok = id.size() == 24 + (node ? node + 1 : 0) && node <= 16 &&
                    id.find('_', sep == std::string_view::npos ? 4 : sep + 1) == std::string_view::npos &&
                    (sep == std::string_view::npos || node > 0);
    if (ok) return id;
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
