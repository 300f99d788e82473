#include "common/sealed_stream.h"

#include <errno.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <vector>

#include "common/crypto.h"

namespace cabin {
namespace {

constexpr std::string_view kMagic{"CABINSEAL\x01", 10};
constexpr size_t kSalt = 16, kTag = 16, kKey = 32;

Error stream_error(std::string what) {
  return make_error(Errc::kInternal, "sealed_stream", std::move(what));
}

struct CipherCtx {
  EVP_CIPHER_CTX* p = EVP_CIPHER_CTX_new();
  ~CipherCtx() { EVP_CIPHER_CTX_free(p); }
};

std::string file_key(std::string_view key, std::string_view salt, std::string_view context) {
  std::string info = "cabin sealed stream\n";
  info.append(salt).append(context);
  return hmac_sha256(key, info);
}

std::array<unsigned char, 12> nonce(uint64_t index) {
  std::array<unsigned char, 12> n{};
  for (int i = 0; i < 8; ++i) n[11 - i] = static_cast<unsigned char>(index >> (8 * i));
  return n;
}

// Reads up to n bytes (fewer only at the end); -1 on an error.
ssize_t read_full(int fd, char* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, buf + got, n - got);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

bool write_full(int fd, const char* buf, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, buf, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    buf += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// One piece, sealed (encrypt) or opened in place; false for a tag that does not match.
bool crypt_piece(bool encrypt, std::string_view key, uint64_t index, bool last, char* data,
                 size_t n, unsigned char* tag) {
  CipherCtx c;
  const auto iv = nonce(index);
  const unsigned char aad = last ? 1 : 0;
  int len = 0;
  auto* bytes = reinterpret_cast<unsigned char*>(data);
  const auto* k = reinterpret_cast<const unsigned char*>(key.data());
  if (!c.p) return false;
  if (encrypt) {
    return EVP_EncryptInit_ex(c.p, EVP_aes_256_gcm(), nullptr, k, iv.data()) == 1 &&
           EVP_EncryptUpdate(c.p, nullptr, &len, &aad, 1) == 1 &&
           EVP_EncryptUpdate(c.p, bytes, &len, bytes, static_cast<int>(n)) == 1 &&
           EVP_EncryptFinal_ex(c.p, bytes + len, &len) == 1 &&
           EVP_CIPHER_CTX_ctrl(c.p, EVP_CTRL_GCM_GET_TAG, kTag, tag) == 1;
  }
  return EVP_DecryptInit_ex(c.p, EVP_aes_256_gcm(), nullptr, k, iv.data()) == 1 &&
         EVP_DecryptUpdate(c.p, nullptr, &len, &aad, 1) == 1 &&
         EVP_DecryptUpdate(c.p, bytes, &len, bytes, static_cast<int>(n)) == 1 &&
         EVP_CIPHER_CTX_ctrl(c.p, EVP_CTRL_GCM_SET_TAG, kTag, tag) == 1 &&
         EVP_DecryptFinal_ex(c.p, bytes + len, &len) == 1;
}

}  // namespace

StreamSealer::StreamSealer(std::string_view key, std::string_view context)
    : ok_(key.size() == kKey) {
  const std::string salt = random_bytes(kSalt);
  head_ = std::string(kMagic) + salt;
  if (ok_) key_ = file_key(key, salt, context);
}

std::string StreamSealer::piece(std::string_view plain, bool last) {
  // Only the last piece is short (an empty one follows a whole last piece).
  if (!ok_ || plain.size() > kSealedPiece || (plain.size() < kSealedPiece) != last) {
    ok_ = false;
    return {};
  }
  const auto len = static_cast<uint32_t>(plain.size());
  std::string out(4 + len + kTag, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(len >> (24 - 8 * i));
  if (len > 0) std::memcpy(out.data() + 4, plain.data(), len);
  auto* tag = reinterpret_cast<unsigned char*>(out.data() + 4 + len);
  if (!crypt_piece(true, key_, index_++, last, out.data() + 4, len, tag)) ok_ = false;
  return out;
}

Result<StreamOpener> StreamOpener::open(int fd, std::string_view key, std::string_view context) {
  if (key.size() != kKey) return stream_error("the sealing key is not 32 bytes");
  std::string head(kMagic.size() + kSalt, '\0');
  if (read_full(fd, head.data(), head.size()) != static_cast<ssize_t>(head.size()) ||
      std::string_view(head).substr(0, kMagic.size()) != kMagic) {
    return stream_error("not a sealed file");
  }
  StreamOpener o;
  o.fd_ = fd;
  o.key_ = file_key(key, head.substr(kMagic.size()), context);
  return o;
}

Result<std::string> StreamOpener::next() {
  if (done_) return std::string();
  unsigned char size[4];
  if (read_full(fd_, reinterpret_cast<char*>(size), 4) != 4)
    return stream_error("the sealed file ends before its last piece");
  const uint32_t len = (uint32_t{size[0]} << 24) | (uint32_t{size[1]} << 16) |
                       (uint32_t{size[2]} << 8) | uint32_t{size[3]};
  if (len > kSealedPiece) return stream_error("a sealed piece is larger than any written");
  std::string piece(len + kTag, '\0');
  if (read_full(fd_, piece.data(), piece.size()) != static_cast<ssize_t>(piece.size()))
    return stream_error("the sealed file ends inside a piece");
  const bool last = len < kSealedPiece;
  auto* tag = reinterpret_cast<unsigned char*>(piece.data() + len);
  if (!crypt_piece(false, key_, index_, last, piece.data(), len, tag)) {
    return stream_error("piece " + std::to_string(index_) +
                        " does not open: the file was changed, or sealed with another key or "
                        "for something else");
  }
  ++index_;
  done_ = last;
  piece.resize(len);
  return piece;
}

Result<uint64_t> sealed_plain_size(int fd) {
  uint64_t at = kMagic.size() + kSalt, plain = 0;
  for (;;) {
    unsigned char size[4];
    if (::pread(fd, size, 4, static_cast<off_t>(at)) != 4)
      return stream_error("the sealed file ends before its last piece");
    const uint32_t len = (uint32_t{size[0]} << 24) | (uint32_t{size[1]} << 16) |
                         (uint32_t{size[2]} << 8) | uint32_t{size[3]};
    if (len > kSealedPiece) return stream_error("a sealed piece is larger than any written");
    plain += len;
    at += 4 + len + kTag;
    if (len < kSealedPiece) return plain;
  }
}

Result<uint64_t> seal_stream(int from, int to, std::string_view key, std::string_view context) {
  StreamSealer sealer(key, context);
  if (!sealer.ok()) return stream_error("the sealing key is not 32 bytes");
  if (!write_full(to, sealer.head().data(), sealer.head().size()))
    return stream_error(std::string("writing: ") + strerror(errno));
  std::string plain(kSealedPiece, '\0');
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = read_full(from, plain.data(), kSealedPiece);
    if (n < 0) return stream_error(std::string("reading: ") + strerror(errno));
    const bool last = static_cast<size_t>(n) < kSealedPiece;
    const std::string out =
        sealer.piece(std::string_view(plain).substr(0, static_cast<size_t>(n)), last);
    if (!sealer.ok()) return stream_error("sealing a piece failed");
    if (!write_full(to, out.data(), out.size()))
      return stream_error(std::string("writing: ") + strerror(errno));
    total += static_cast<uint64_t>(n);
    if (last) return total;
  }
}

Result<uint64_t> open_stream(int from, int to, std::string_view key, std::string_view context) {
  auto opener = StreamOpener::open(from, key, context);
  if (!opener) return opener.error();
  uint64_t total = 0;
  while (!opener->done()) {
    auto piece = opener->next();
    if (!piece) return piece.error();
    if (!write_full(to, piece->data(), piece->size()))
      return stream_error(std::string("writing: ") + strerror(errno));
    total += piece->size();
  }
  return total;
}

bool is_sealed_stream(int fd) {
  char head[kMagic.size()];
  return ::pread(fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head) &&
         std::string_view(head, sizeof head) == kMagic;
}

}  // namespace cabin
