#include "server/auth/tokens.h"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "common/crypto.h"

namespace cabin::auth {
namespace {

constexpr std::string_view kDomain = "cabin-token-v1";
constexpr char kSep = '~';

Error invalid(std::string message) {
  return make_error(Errc::kUnauthenticated, "invalid_token", std::move(message));
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

template <typename T>
bool parse_number(std::string_view s, T& out) {
  if (s.empty() || s.size() > 19) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string mac(const std::string& key, std::string_view payload) {
  std::string data(kDomain);
  data.push_back('\0');
  data.append(payload);
  return hmac_sha256(key, data);
}

Result<std::string> write_key(const std::filesystem::path& dir, const std::string& kid) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path path = dir / ("token-" + kid + ".key");
  fs::path tmp = dir / (".token-" + kid + ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_write, ec);
    out << random_hex(32) << "\n";
    if (!out) return make_error(Errc::kInternal, "state_dir", "cannot write " + tmp.string());
  }
  // Renamed into place so a concurrent load never sees a half-written key.
  fs::rename(tmp, path, ec);
  if (ec) return make_error(Errc::kInternal, "state_dir", "cannot write " + path.string());
  return kid;
}

// Key ids are "k" and ten digits (a creation time), so string order is age order.
std::string next_key_id(const std::map<std::string, std::string>& existing) {
  int64_t n = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  for (const auto& [kid, _] : existing) {
    int64_t v = 0;
    if (kid.size() == 11 && kid[0] == 'k' && parse_number(std::string_view(kid).substr(1), v)) {
      n = std::max(n, v + 1);
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "k%010lld", static_cast<long long>(n));
  return buf;
}

}  // namespace

std::optional<int> parse_scope(std::string_view scope) {
  if (scope == "cdp" || scope == "view" || scope == "control") return 0;
  constexpr std::string_view kPreview = "preview:";
  if (scope.substr(0, kPreview.size()) != kPreview) return std::nullopt;
  std::string_view digits = scope.substr(kPreview.size());
  int port = 0;
  if (digits.empty() || digits.size() > 5 || digits[0] == '0' || !parse_number(digits, port) ||
      port < 1 || port > 65535) {
    return std::nullopt;
  }
  return port;
}

TokenService::TokenService(std::map<std::string, std::string> keys, const Clock& clock)
    : keys_(std::move(keys)), clock_(clock) {}

Result<std::map<std::string, std::string>> TokenService::load_or_create_keys(
    const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(Errc::kInternal, "state_dir", "cannot create " + dir.string());
  fs::permissions(dir, fs::perms::owner_all, ec);
  std::map<std::string, std::string> keys;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("token-", 0) != 0 || entry.path().extension() != ".key") continue;
    std::string kid = name.substr(6, name.size() - 6 - 4);
    std::ifstream in(entry.path());
    std::string hex;
    in >> hex;
    if (kid.empty() || kid.find(kSep) != std::string::npos || hex.size() < 64) {
      return make_error(Errc::kInternal, "bad_key", "malformed signing key " + entry.path().string());
    }
    keys[kid] = hex;
  }
  if (keys.empty()) {
    auto kid = write_key(dir, next_key_id(keys));
    if (!kid) return kid.error();
    return load_or_create_keys(dir);
  }
  return keys;
}

Result<std::string> TokenService::add_key(const std::filesystem::path& dir) {
  auto existing = load_or_create_keys(dir);
  if (!existing) return existing.error();
  return write_key(dir, next_key_id(*existing));
}

std::string TokenService::issue(const std::string& session_id, const std::string& scope,
                                int64_t expires_at, uint32_t generation) const {
  const auto& [kid, key] = *keys_.rbegin();
  std::string payload = session_id + kSep + scope + kSep + std::to_string(expires_at) + kSep +
                        kid + kSep + std::to_string(generation);
  return base64url_encode(payload) + "." + base64url_encode(mac(key, payload));
}

Result<TokenClaims> TokenService::decode(std::string_view token) const {
  if (token.empty()) return invalid("missing token");
  if (token.size() > kMaxTokenLength) return invalid("token too long");
  size_t dot = token.find('.');
  if (dot == std::string_view::npos) return invalid("malformed token");
  auto payload = base64url_decode(token.substr(0, dot));
  auto sig = base64url_decode(token.substr(dot + 1));
  if (!payload || !sig) return invalid("malformed token");
  auto parts = split(*payload, kSep);
  if (parts.size() != 5) return invalid("malformed token");
  TokenClaims claims;
  claims.session_id = std::string(parts[0]);
  claims.scope = std::string(parts[1]);
  claims.key_id = std::string(parts[3]);
  if (!parse_number(parts[2], claims.expires_at) || !parse_number(parts[4], claims.generation)) {
    return invalid("malformed token");
  }
  auto key = keys_.find(claims.key_id);
  // Unknown key ids still cost one HMAC so timing does not tell them apart.
  std::string expected = mac(key == keys_.end() ? keys_.rbegin()->second : key->second, *payload);
  if (!constant_time_equal(expected, *sig) || key == keys_.end()) {
    return invalid("token signature does not verify");
  }
  return claims;
}

Result<TokenClaims> TokenService::verify(std::string_view token, std::string_view session_id,
                                         std::string_view scope) const {
  return verify_any(token, session_id, {scope});
}

Result<TokenClaims> TokenService::verify_any(std::string_view token, std::string_view session_id,
                                             const std::vector<std::string_view>& scopes) const {
  auto claims = decode(token);
  if (!claims) return claims;
  if (claims->session_id != session_id) return invalid("token belongs to another session");
  bool scope_ok = false;
  for (auto s : scopes) scope_ok = scope_ok || claims->scope == s;
  if (!scope_ok) {
    std::string want;
    for (auto s : scopes) want += (want.empty() ? "" : " or ") + std::string(s);
    return make_error(Errc::kPermissionDenied, "token_scope",
                      "token scope " + claims->scope + " does not allow this; it needs " + want);
  }
  if (auto live = check_expiry(*claims); !live) return live.error();
  return claims;
}

Error token_revoked(std::string message) {
  return make_error(Errc::kUnauthenticated, "token_revoked", std::move(message));
}

Result<void> TokenService::check_current(const TokenClaims& claims, uint32_t generation) const {
  if (auto live = check_expiry(claims); !live) return live;
  if (claims.generation != generation) return token_revoked();
  return {};
}

Result<void> TokenService::check_expiry(const TokenClaims& claims) const {
  if (clock_.unix_seconds() >= claims.expires_at) {
    return make_error(Errc::kUnauthenticated, "token_expired", "token has expired");
  }
  return {};
}

}  // namespace cabin::auth
