// Small cryptographic helpers over OpenSSL: random bytes, HMAC-SHA256, encodings, constant-time
// compare, sealing with AES-256-GCM.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cabin {

// Cryptographically secure random bytes; aborts if the RNG fails (an invariant, not input).
std::string random_bytes(size_t n);
// n random bytes as lowercase hex (2n characters).
std::string random_hex(size_t n);

std::string hmac_sha256(std::string_view key, std::string_view data);
std::string sha256_hex(std::string_view data);

// SHA-256 over data that arrives in pieces (a streamed file).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::string_view data);
  // The digest as lowercase hex; the object is spent after it.
  std::string hex();

 private:
  struct State;
  State* state_;
};

std::string base64url_encode(std::string_view data);
// Rejects padding, whitespace and characters outside the URL-safe alphabet.
std::optional<std::string> base64url_decode(std::string_view text);
std::string base64_encode(std::string_view data);
// Standard base64 (RFC 4648 section 4), with or without its padding; rejects anything else.
std::optional<std::string> base64_decode(std::string_view text);

// Compares without leaking where the inputs differ; lengths may leak.
bool constant_time_equal(std::string_view a, std::string_view b);

// AES-256-GCM under a 32-byte key: base64url of a random 12-byte nonce, the ciphertext and the
// 16-byte tag. `context` (the additional data) binds it to what it is for (a profile's id, say):
// it opens only with the same context. open_sealed answers nullopt for another key or context, a
// wrong key size or any change. An empty context is no additional data.
std::optional<std::string> seal(std::string_view key, std::string_view plain,
                                std::string_view context = {});
std::optional<std::string> open_sealed(std::string_view key, std::string_view sealed,
                                       std::string_view context = {});

}  // namespace cabin
