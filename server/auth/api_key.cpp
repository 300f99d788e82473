#include "server/auth/api_key.h"

#include <fstream>

#include "common/crypto.h"

namespace cabin::auth {
namespace {

bool valid_key(std::string_view key) {
  if (key.size() < 16 || key.size() > 256) return false;
  for (char c : key) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

}  // namespace

Result<LoadedApiKey> load_or_create_api_key(const std::filesystem::path& state_dir,
                                            const char* env_value) {
  namespace fs = std::filesystem;
  if (env_value != nullptr && *env_value != '\0') {
    if (!valid_key(env_value)) {
      return make_error(Errc::kInvalidArgument, "bad_api_key",
                        "CABIN_API_KEY must be 16..256 printable characters without spaces");
    }
    return LoadedApiKey{env_value, false, {}};
  }
  fs::path path = state_dir / "api-key";
  std::ifstream in(path);
  if (in) {
    std::string key;
    in >> key;
    if (!valid_key(key)) {
      return make_error(Errc::kInvalidArgument, "bad_api_key", "malformed key in " + path.string());
    }
    return LoadedApiKey{key, false, path};
  }
  std::string key = "cabin_" + random_hex(24);
  {
    std::ofstream out(path);
    out << key << "\n";
    if (!out) return make_error(Errc::kInternal, "state_dir", "cannot write " + path.string());
  }
  std::error_code ec;
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write, ec);
  return LoadedApiKey{key, true, path};
}

bool check_bearer(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.size() <= kPrefix.size() ||
      authorization.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  return constant_time_equal(authorization.substr(kPrefix.size()), key);
}

}  // namespace cabin::auth
