// ByteReader: big-endian integers and byte runs from a span, bounds-checked. A read past the end
// fails the reader for good, so a parser can read a whole structure and check ok() once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace cabin {

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : b_(bytes) {}
  bool ok() const { return ok_; }
  size_t pos() const { return pos_; }
  size_t left() const { return b_.size() - pos_; }
  void fail() { ok_ = false; }

  // The next `bytes` (1 to 4) as one unsigned integer; 0 once failed.
  uint32_t u(int bytes) {
    if (!ok_ || left() < static_cast<size_t>(bytes)) {
      ok_ = false;
      return 0;
    }
    uint32_t v = 0;
    for (int i = 0; i < bytes; ++i) v = v << 8 | b_[pos_++];
    return v;
  }
  std::span<const uint8_t> take(size_t n) {
    if (!ok_ || left() < n) {
      ok_ = false;
      return {};
    }
    auto s = b_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

 protected:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace cabin
