// The agent's children: the environment they get. ChildProcess itself is common/child_process.h.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/child_process.h"

namespace cabin::agent {

namespace net = boost::asio;

// The agent's environment (without the secret, which main removed) plus overrides.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& overrides);

}  // namespace cabin::agent
