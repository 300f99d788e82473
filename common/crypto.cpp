#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <array>
#include <cstdlib>

namespace cabin {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    std::abort();
  }
  return out;
}

std::string random_hex(size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string raw = random_bytes(n);
  std::string out;
  out.reserve(2 * n);
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len);
  return std::string(reinterpret_cast<char*>(md), len);
}

struct Sha256::State {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
};

Sha256::Sha256() : state_(new State) {
  if (!state_->ctx || EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(state_->ctx);
  delete state_;
}

void Sha256::update(std::string_view data) {
  if (EVP_DigestUpdate(state_->ctx, data.data(), data.size()) != 1) std::abort();
}

std::string Sha256::hex() {
  static constexpr char kHex[] = "0123456789abcdef";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(state_->ctx, md, &len) != 1) std::abort();
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  static constexpr char kHex[] = "0123456789abcdef";
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  std::string out;
  for (unsigned char c : md) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

namespace {
constexpr char kB64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string encode(std::string_view data, const char* alphabet, bool pad) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  auto b = [&](size_t k) { return static_cast<unsigned char>(data[k]); };
  for (; i + 2 < data.size(); i += 3) {
    unsigned v = (b(i) << 16) | (b(i + 1) << 8) | b(i + 2);
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.push_back(alphabet[(v >> 6) & 63]);
    out.push_back(alphabet[v & 63]);
  }
  size_t rest = data.size() - i;
  if (rest == 1) {
    unsigned v = b(i) << 16;
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    if (pad) out.append("==");
  } else if (rest == 2) {
    unsigned v = (b(i) << 16) | (b(i + 1) << 8);
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.push_back(alphabet[(v >> 6) & 63]);
    if (pad) out.push_back('=');
  }
  return out;
}
}  // namespace

std::string base64url_encode(std::string_view data) { return encode(data, kB64Url, false); }
std::string base64_encode(std::string_view data) { return encode(data, kB64, true); }

namespace {

std::optional<std::string> decode(std::string_view text, const char* alphabet) {
  std::array<int, 256> rev;
  rev.fill(-1);
  for (int i = 0; i < 64; ++i) rev[static_cast<unsigned char>(alphabet[i])] = i;
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  unsigned acc = 0;
  int bits = 0;
  for (char c : text) {
    int v = rev[static_cast<unsigned char>(c)];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  // Non-canonical encodings (stray low bits) are rejected so one token has one spelling.
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

}  // namespace

std::optional<std::string> base64url_decode(std::string_view text) { return decode(text, kB64Url); }

std::optional<std::string> base64_decode(std::string_view text) {
  // Padded to a multiple of 4, or not padded at all.
  const size_t end = text.find_last_not_of('=') + 1;
  const size_t pad = text.size() - end;
  if (pad > 2 || (pad > 0 && text.size() % 4 != 0)) return std::nullopt;
  return decode(text.substr(0, end), kB64);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

namespace {

constexpr size_t kSealKey = 32, kSealNonce = 12, kSealTag = 16;

struct CipherCtx {
  EVP_CIPHER_CTX* p = EVP_CIPHER_CTX_new();
  ~CipherCtx() { EVP_CIPHER_CTX_free(p); }
};

const unsigned char* bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

std::optional<std::string> seal(std::string_view key, std::string_view plain,
                                std::string_view context) {
  if (key.size() != kSealKey || plain.size() > (1u << 30)) return std::nullopt;
  const std::string nonce = random_bytes(kSealNonce);
  std::string out = nonce;
  out.resize(kSealNonce + plain.size() + kSealTag);
  auto* ct = reinterpret_cast<unsigned char*>(out.data()) + kSealNonce;
  CipherCtx c;
  int n = 0, tail = 0;
  int aad = 0;
  if (!c.p || EVP_EncryptInit_ex(c.p, EVP_aes_256_gcm(), nullptr, bytes(key), bytes(nonce)) != 1 ||
      (!context.empty() && EVP_EncryptUpdate(c.p, nullptr, &aad, bytes(context),
                                             static_cast<int>(context.size())) != 1) ||
      EVP_EncryptUpdate(c.p, ct, &n, bytes(plain), static_cast<int>(plain.size())) != 1 ||
      EVP_EncryptFinal_ex(c.p, ct + n, &tail) != 1 ||
      EVP_CIPHER_CTX_ctrl(c.p, EVP_CTRL_GCM_GET_TAG, kSealTag, ct + plain.size()) != 1)
    return std::nullopt;
  return base64url_encode(out);
}

std::optional<std::string> open_sealed(std::string_view key, std::string_view sealed,
                                       std::string_view context) {
  auto raw = base64url_decode(sealed);
  if (key.size() != kSealKey || !raw || raw->size() < kSealNonce + kSealTag) return std::nullopt;
  const std::string_view all(*raw);
  const auto nonce = all.substr(0, kSealNonce);
  const auto ct = all.substr(kSealNonce, all.size() - kSealNonce - kSealTag);
  std::string tag(all.substr(all.size() - kSealTag));
  std::string plain(ct.size(), '\0');
  CipherCtx c;
  int n = 0, tail = 0;
  int aad = 0;
  if (!c.p || EVP_DecryptInit_ex(c.p, EVP_aes_256_gcm(), nullptr, bytes(key), bytes(nonce)) != 1 ||
      (!context.empty() && EVP_DecryptUpdate(c.p, nullptr, &aad, bytes(context),
                                             static_cast<int>(context.size())) != 1) ||
      EVP_DecryptUpdate(c.p, reinterpret_cast<unsigned char*>(plain.data()), &n, bytes(ct),
                        static_cast<int>(ct.size())) != 1 ||
      EVP_CIPHER_CTX_ctrl(c.p, EVP_CTRL_GCM_SET_TAG, kSealTag, tag.data()) != 1 ||
      EVP_DecryptFinal_ex(c.p, reinterpret_cast<unsigned char*>(plain.data()) + n, &tail) != 1)
    return std::nullopt;
  return plain;
}

}  // namespace cabin
