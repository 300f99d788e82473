// Logging: spdlog loggers named after the component; messages carry the session id where one applies.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace cabin {

// Returns the logger for a component ("api", "sessions", "driver.namespace", ...), creating it once.
std::shared_ptr<spdlog::logger> logger(const std::string& component);
// Sets the level for all loggers: "trace", "debug", "info", "warn", "error".
void set_log_level(const std::string& level);
// Every line one JSON object from now on, for all loggers: time (UTC), level, component,
// message, and session when the message names one.
void set_log_json();

}  // namespace cabin
