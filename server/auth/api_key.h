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

// Checks an `Authorization` header value ("Bearer <key>") in constant time.
bool check_bearer(std::string_view authorization, std::string_view key);

}  // namespace cabin::auth
