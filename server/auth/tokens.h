// TokenService: issues and checks the HMAC capability tokens carried by every URL cabind hands out.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/result.h"

namespace cabin::auth {

// What a token grants. Scopes: "cdp", "view", "control", "preview:<port>".
struct TokenClaims {
  std::string session_id;
  std::string scope;
  int64_t expires_at = 0;  // unix seconds
  std::string key_id;
  uint32_t generation = 0;  // the session's token generation; bumping it revokes all tokens
};

// Tokens longer than this are refused before any parsing.
inline constexpr size_t kMaxTokenLength = 512;

class TokenService {
 public:
  // keys: key id -> secret (at least 32 bytes). The greatest key id signs; all verify.
  TokenService(std::map<std::string, std::string> keys, const Clock& clock);

  // Loads every `token-<kid>.key` in dir, creating one when there is none.
  static Result<std::map<std::string, std::string>> load_or_create_keys(
      const std::filesystem::path& dir);

  std::string issue(const std::string& session_id, const std::string& scope, int64_t expires_at,
                    uint32_t generation) const;

  // Checks signature (constant time), expiry against the clock, session and scope.
  // The caller compares claims.generation with the session's current generation.
  Result<TokenClaims> verify(std::string_view token, std::string_view session_id,
                             std::string_view scope) const;

  // The same, accepting any of `scopes` ("view" or "control" for the live view).
  Result<TokenClaims> verify(std::string_view token, std::string_view session_id,
                             std::initializer_list<std::string_view> scopes) const;

  // Parses and checks the signature only.
  Result<TokenClaims> decode(std::string_view token) const;

  const Clock& clock() const { return clock_; }

 private:
  std::map<std::string, std::string> keys_;
  const Clock& clock_;
};

}  // namespace cabin::auth
