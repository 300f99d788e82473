// TokenService: issues and checks the HMAC capability tokens carried by every URL cabind hands out.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"

namespace cabin::auth {

// What a token grants. Scopes: "cdp", "view", "control", "preview:<port>@<preview id>".
struct TokenClaims {
  std::string session_id;
  std::string scope;
  int64_t expires_at = 0;  // unix seconds
  std::string key_id;
  uint32_t generation = 0;  // the session's token generation; bumping it revokes all tokens
};

// Tokens longer than this are refused before any parsing.
inline constexpr size_t kMaxTokenLength = 512;

// Scopes as clients name them: "cdp" (the CDP bridge and discovery), "view" (watch: frames,
// live view, vnc read-only), "control" (view plus input), "preview:<port>" (the port's preview).
// Ports are 1..65535 in canonical decimal. Returns the port for a preview scope, 0 for the
// others, nullopt if invalid.
std::optional<int> parse_scope(std::string_view scope);
// The scope a preview token carries: bound to one preview, so deleting or replacing the preview
// ends its tokens even when a new preview of the same port follows.
inline std::string preview_scope(int port, std::string_view preview_id) {
  return "preview:" + std::to_string(port) + "@" + std::string(preview_id);
}

// The refusal of a token that was valid once: its session's tokens were revoked, or what it
// was issued for is gone.
Error token_revoked(std::string message = "token has been revoked");

class TokenService {
 public:
  // keys: key id -> secret (at least 32 bytes). The greatest key id signs; all verify.
  TokenService(std::map<std::string, std::string> keys, const Clock& clock);

  // Loads every `token-<kid>.key` in dir, creating one when there is none.
  static Result<std::map<std::string, std::string>> load_or_create_keys(
      const std::filesystem::path& dir);
  // Rotation: writes a new key whose id sorts after every existing one, so it signs from the next
  // load on; the old keys keep verifying until their files are removed. Returns the new key id.
  static Result<std::string> add_key(const std::filesystem::path& dir);

  // Replaces the key set (SIGHUP re-reads the key directory). keys must not be empty.
  void set_keys(std::map<std::string, std::string> keys) {
    keys_ = std::move(keys);
    ++key_epoch_;
  }
  // Changes whenever the key set does: a caller that remembers a verified token re-verifies it
  // when this moved (a removed key must stop its tokens).
  uint64_t key_epoch() const { return key_epoch_; }
  const std::map<std::string, std::string>& keys() const { return keys_; }
  // The id of the signing key.
  const std::string& signing_key_id() const { return keys_.rbegin()->first; }

  std::string issue(const std::string& session_id, const std::string& scope, int64_t expires_at,
                    uint32_t generation) const;

  // Checks signature (constant time), expiry against the clock, session and scope.
  // The caller compares claims.generation with the session's current generation.
  Result<TokenClaims> verify(std::string_view token, std::string_view session_id,
                             std::string_view scope) const;
  // A braced list would otherwise bind to string_view's iterator-pair constructor.
  Result<TokenClaims> verify(std::string_view token, std::string_view session_id,
                             std::initializer_list<std::string_view> scopes) const = delete;
  // As verify, accepting any one of `scopes`.
  Result<TokenClaims> verify_any(std::string_view token, std::string_view session_id,
                                 const std::vector<std::string_view>& scopes) const;

  // Whether verified claims still hold: within their expiry, and of the session's current token
  // generation (`generation`), else token_revoked.
  Result<void> check_current(const TokenClaims& claims, uint32_t generation) const;

  // Parses and checks the signature only.
  Result<TokenClaims> decode(std::string_view token) const;

  const Clock& clock() const { return clock_; }

 private:
  Result<void> check_expiry(const TokenClaims& claims) const;

  std::map<std::string, std::string> keys_;
  uint64_t key_epoch_ = 0;
  const Clock& clock_;
};

}  // namespace cabin::auth
