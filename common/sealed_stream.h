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

// Copies `from` (until its end) into `to`, sealed. Blocking: run it off an event loop.
Result<uint64_t> seal_stream(int from, int to, std::string_view key, std::string_view context);
// Copies the sealed `from` into `to`, opened; an error for a file that does not open whole. What
// it wrote before a piece that failed stays written: the reader must treat the output as void
// unless this succeeds. Blocking: run it off an event loop.
Result<uint64_t> open_stream(int from, int to, std::string_view key, std::string_view context);

// Whether the file at `fd` (read from its offset) starts as a sealed stream does.
bool is_sealed_stream(int fd);

}  // namespace cabin
