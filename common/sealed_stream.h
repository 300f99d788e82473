// Large files sealed at rest, as a stream: AES-256-GCM over pieces of at most kSealedPiece bytes,
// each with a tag of its own, so that neither side ever holds the whole (a hibernated VM's RAM,
// a recording). The file's key is derived from the server's key, a random salt and a context
// (what the file is for, such as a session id): a file opens only with the same key and context,
// and a piece changed, dropped, moved or cut off at the end fails the open at that piece.
//
// Format: "CABINSEAL\x01", a 16-byte salt, then pieces: the plaintext's length (4 bytes, big
// endian), the ciphertext, the 16-byte tag. Every piece but the last is whole; the last is
// shorter (empty after a whole one). Piece i's nonce is its index; its additional data says
// whether it is the last, so that a file cut at a piece's end does not open either.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin {

inline constexpr size_t kSealedPiece = 1u << 20;

// Seals a stream piece by piece, for a writer that has its bytes in hand (not an fd): head()
// first, then piece() for each whole kSealedPiece of plaintext and once with `last` for what is
// left (shorter than a piece, or empty).
class StreamSealer {
 public:
  StreamSealer(std::string_view key, std::string_view context);
  const std::string& head() const { return head_; }
  std::string piece(std::string_view plain, bool last);
  bool ok() const { return ok_; }

 private:
  std::string head_, key_;
  uint64_t index_ = 0;
  bool ok_;
};

// Reads a sealed stream piece by piece from `fd` (from its offset): open() reads the head, each
// next() one piece's plaintext; `done` once the last piece came. An error for a stream that does
// not open whole.
class StreamOpener {
 public:
  static Result<StreamOpener> open(int fd, std::string_view key, std::string_view context);
  Result<std::string> next();
  bool done() const { return done_; }

 private:
  int fd_ = -1;
  std::string key_;
  uint64_t index_ = 0;
  bool done_ = false;
};

// The plaintext's length of the sealed stream at `fd` (walking its pieces' lengths, from offset
// 0), or an error for one whose pieces do not add up to the file.
Result<uint64_t> sealed_plain_size(int fd);

// Copies `from` (until its end) into `to`, sealed. Blocking: run it off an event loop.
Result<uint64_t> seal_stream(int from, int to, std::string_view key, std::string_view context);
// Copies the sealed `from` into `to`, opened; an error for a file that does not open whole. What
// it wrote before a piece that failed stays written: the reader must treat the output as void
// unless this succeeds. Blocking: run it off an event loop.
Result<uint64_t> open_stream(int from, int to, std::string_view key, std::string_view context);

// Whether the file at `fd` (read from its offset) starts as a sealed stream does.
bool is_sealed_stream(int fd);

}  // namespace cabin
