#include "vm-images/agent/process.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>

extern char** environ;

namespace cabin::agent {

std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    vars[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
  }
  for (const auto& [k, v] : overrides) vars[k] = v;
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

Result<std::string> find_program(const std::string& name) {
  auto missing = [&](int err) {
    return make_error(Errc::kInvalidArgument, "spawn_failed",
                      "cannot start '" + name + "': " + strerror(err));
  };
  if (name.empty()) return missing(ENOENT);
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) != 0) return missing(errno);
    return name;
  }
  const char* path_env = std::getenv("PATH");
  std::string_view path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  int err = ENOENT;
  while (true) {
    const size_t colon = path.find(':');
    std::string dir(path.substr(0, colon));
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat sb;
    if (::stat(candidate.c_str(), &sb) == 0 && S_ISREG(sb.st_mode)) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      err = EACCES;
    }
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  return missing(err);
}

}  // namespace cabin::agent
