#include "server/auth/api_key.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "common/crypto.h"
#include "common/unique_fd.h"

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

Result<std::string> load_or_create_key_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (in) {
    std::string hex;
    in >> hex;
    std::string key;
    for (size_t i = 0; i + 1 < hex.size() && hex.size() == 64; i += 2) {
      key.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    if (key.size() != 32 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return make_error(Errc::kInvalidArgument, "bad_key_file", "malformed key in " + path.string());
    }
    return key;
  }
  const std::string key = random_bytes(32);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : key) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  // Private from its first byte: created with mode 0600, never written wider.
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  const std::string line = hex + "\n";
  if (!fd.valid() || ::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    return make_error(Errc::kInternal, "key_file", "cannot write " + path.string());
  return key;
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
