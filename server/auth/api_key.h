// ApiKey: the admin API key for the control API, from CABIN_API_KEY or generated into the state dir.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin::auth {

struct LoadedApiKey {
  std::string key;
  bool generated = false;             // true: written to `path` just now
  std::filesystem::path path;         // empty when the key came from the environment
};

// env_value: CABIN_API_KEY if set. Keys are 16..256 printable ASCII characters.
Result<LoadedApiKey> load_or_create_api_key(const std::filesystem::path& state_dir,
                                            const char* env_value);

// A key that seals what cabind keeps (32 random bytes as hex in `path`, mode 0600), made on first
// use. The one for live sessions' handoffs belongs in the run dir, a tmpfs: the disk never holds
// a session's secrets in the clear, and a reboot, which ends every sandbox, forgets it. The one
// for profiles, which outlive reboots, is in the state dir.
Result<std::string> load_or_create_key_file(const std::filesystem::path& path);

// Checks an `Authorization` header value ("Bearer <key>") in constant time.
bool check_bearer(std::string_view authorization, std::string_view key);

}  // namespace cabin::auth
