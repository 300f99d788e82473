// Sealed streams: what goes in comes out whole under the same key and context, and a file that
// was changed, cut short, reordered, or is opened with another key or context, does not open.
#include "common/sealed_stream.h"

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "common/crypto.h"
#include "common/unique_fd.h"

using cabin::UniqueFd;

namespace {

UniqueFd memfile(const std::string& bytes = {}) {
  UniqueFd fd(::memfd_create("sealed-test", MFD_CLOEXEC));
  REQUIRE(fd.valid());
  REQUIRE(::write(fd.get(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::lseek(fd.get(), 0, SEEK_SET);
  return fd;
}

std::string contents(int fd) {
  std::string out(static_cast<size_t>(::lseek(fd, 0, SEEK_END)), '\0');
  REQUIRE(::pread(fd, out.data(), out.size(), 0) == static_cast<ssize_t>(out.size()));
  return out;
}

std::string sealed(const std::string& plain, const std::string& key, const std::string& context) {
  auto in = memfile(plain);
  auto out = memfile();
  auto n = cabin::seal_stream(in.get(), out.get(), key, context);
  REQUIRE(n);
  CHECK(*n == plain.size());
  return contents(out.get());
}

cabin::Result<std::string> opened(const std::string& file, const std::string& key,
                                  const std::string& context) {
  auto in = memfile(file);
  auto out = memfile();
  auto n = cabin::open_stream(in.get(), out.get(), key, context);
  if (!n) return n.error();
  return contents(out.get());
}

}  // namespace

TEST_CASE("sealed streams: a round trip at every length that matters") {
  const std::string key = cabin::random_bytes(32);
  for (size_t size : {size_t{0}, size_t{1}, cabin::kSealedPiece - 1, cabin::kSealedPiece,
                      cabin::kSealedPiece + 1, 3 * cabin::kSealedPiece + 12345}) {
    INFO(size);
    std::string plain(size, '\0');
    for (size_t i = 0; i < size; ++i) plain[i] = static_cast<char>(i * 7 + i / 4096);
    const std::string file = sealed(plain, key, "ses_a");
    auto back = opened(file, key, "ses_a");
    REQUIRE(back);
    CHECK(*back == plain);
    if (size > 64) CHECK(file.find(plain.substr(0, 64)) == std::string::npos);
    auto probe = memfile(file);
    CHECK(cabin::is_sealed_stream(probe.get()));
  }
  auto plain = memfile("not sealed");
  CHECK_FALSE(cabin::is_sealed_stream(plain.get()));
}

TEST_CASE("sealed streams: another key or context, a change, a cut or a reorder does not open") {
  const std::string key = cabin::random_bytes(32);
  std::string plain(2 * cabin::kSealedPiece + 100, 'x');
  plain[cabin::kSealedPiece] = 'y';
  const std::string file = sealed(plain, key, "ses_a");
  CHECK_FALSE(opened(file, cabin::random_bytes(32), "ses_a"));
  CHECK_FALSE(opened(file, key, "ses_b"));
  std::string changed = file;
  changed[file.size() / 2] ^= 1;
  CHECK_FALSE(opened(changed, key, "ses_a"));
  // Cut after the first two (whole) pieces: each opens, but no last piece came.
  const size_t head = 10 + 16, piece = 4 + cabin::kSealedPiece + 16;
  auto cut = opened(file.substr(0, head + 2 * piece), key, "ses_a");
  REQUIRE_FALSE(cut);
  CHECK(cut.error().message.find("ends before its last piece") != std::string::npos);
  // The first two pieces swapped.
  std::string swapped = file.substr(0, head) + file.substr(head + piece, piece) +
                        file.substr(head, piece) + file.substr(head + 2 * piece);
  auto reordered = opened(swapped, key, "ses_a");
  REQUIRE_FALSE(reordered);
  CHECK(reordered.error().message.find("piece 0 does not open") != std::string::npos);
  CHECK_FALSE(opened("", key, "ses_a"));
  CHECK_FALSE(opened(file, key.substr(0, 16), "ses_a"));
}

TEST_CASE("sealed streams: sealed piece by piece as bytes come, opened by the file reader") {
  const std::string key = cabin::random_bytes(32);
  for (size_t size : {size_t{0}, cabin::kSealedPiece, 2 * cabin::kSealedPiece + 7}) {
    INFO(size);
    const std::string plain(size, 'r');
    cabin::StreamSealer sealer(key, "rec");
    std::string file = sealer.head();
    size_t at = 0;
    for (; size - at >= cabin::kSealedPiece; at += cabin::kSealedPiece) {
      file += sealer.piece(std::string_view(plain).substr(at, cabin::kSealedPiece), false);
    }
    file += sealer.piece(std::string_view(plain).substr(at), true);
    REQUIRE(sealer.ok());
    auto fd = memfile(file);
    auto n = cabin::sealed_plain_size(fd.get());
    REQUIRE(n);
    CHECK(*n == size);
    auto back = opened(file, key, "rec");
    REQUIRE(back);
    CHECK(*back == plain);
  }
  // A short piece that is not the last, or a whole one said to be, is refused.
  cabin::StreamSealer bad(key, "rec");
  (void)bad.piece("short", false);
  CHECK_FALSE(bad.ok());
}
