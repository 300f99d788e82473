// The agent's children: the environment they get. ChildProcess itself is common/child_process.h.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/child_process.h"
#include "common/result.h"

namespace cabin::agent {

namespace net = boost::asio;

// The agent's environment (without the secret, which main removed) plus overrides.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& overrides);

// `name` as posix_spawnp would find it in the agent's PATH (a name with a slash as it is), so that
// a missing program is still a spawn failure when the filter helper starts in its place.
// Errors: spawn_failed.
Result<std::string> find_program(const std::string& name);

}  // namespace cabin::agent
