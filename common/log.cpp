#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

namespace cabin {

std::shared_ptr<spdlog::logger> logger(const std::string& component) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (auto l = spdlog::get(component)) return l;
  auto l = spdlog::stderr_color_mt(component);
  l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  l->set_level(spdlog::get_level());
  return l;
}

void set_log_level(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  spdlog::set_level(lvl);
  spdlog::apply_all([lvl](std::shared_ptr<spdlog::logger> l) { l->set_level(lvl); });
}

}  // namespace cabin
