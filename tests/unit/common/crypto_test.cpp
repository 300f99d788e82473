#include <catch2/catch.hpp>

#include "common/crypto.h"

using namespace cabin;

TEST_CASE("base64url round-trips every length") {
  std::string data;
  for (int i = 0; i < 70; ++i) {
    auto enc = base64url_encode(data);
    REQUIRE(enc.find_first_of("+/=") == std::string::npos);
    auto dec = base64url_decode(enc);
    REQUIRE(dec);
    REQUIRE(*dec == data);
    data.push_back(static_cast<char>(i * 37));
  }
}

TEST_CASE("base64url rejects what it never produces") {
  CHECK_FALSE(base64url_decode("a"));        // impossible length
  CHECK_FALSE(base64url_decode("ab=="));     // padding
  CHECK_FALSE(base64url_decode("a+b/"));     // standard alphabet
  CHECK_FALSE(base64url_decode("ab c"));     // whitespace
  CHECK_FALSE(base64url_decode("QR"));       // stray low bits: non-canonical
  CHECK(base64url_decode("QQ") == std::string("A"));
}

TEST_CASE("base64 decodes the standard alphabet, padded or not") {
  CHECK(base64_decode("") == std::string());
  CHECK(base64_decode("YQ==") == std::string("a"));
  CHECK(base64_decode("YQ") == std::string("a"));
  CHECK(base64_decode("YWI=") == std::string("ab"));
  CHECK(base64_decode("+/8=") == std::string("\xfb\xff", 2));
  CHECK(base64_decode(base64_encode(std::string("\0\x01\xff\xfe", 4))) ==
        std::string("\0\x01\xff\xfe", 4));
  CHECK_FALSE(base64_decode("YQ="));    // padding that does not make a multiple of 4
  CHECK_FALSE(base64_decode("Y==="));   // too much padding
  CHECK_FALSE(base64_decode("Y=Q="));   // padding inside
  CHECK_FALSE(base64_decode("-_8="));   // the URL alphabet
  CHECK_FALSE(base64_decode("YQ ="));   // whitespace
  CHECK_FALSE(base64_decode("not base64!"));
}

TEST_CASE("hmac_sha256 matches RFC 4231 test case 2") {
  auto mac = hmac_sha256("Jefe", "what do ya want for nothing?");
  std::string hex;
  for (unsigned char c : mac) {
    static const char* d = "0123456789abcdef";
    hex.push_back(d[c >> 4]);
    hex.push_back(d[c & 15]);
  }
  CHECK(hex == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("constant_time_equal compares contents and lengths") {
  CHECK(constant_time_equal("abc", "abc"));
  CHECK_FALSE(constant_time_equal("abc", "abd"));
  CHECK_FALSE(constant_time_equal("abc", "abcd"));
  CHECK(random_hex(16).size() == 32);
  CHECK(random_hex(16) != random_hex(16));
}

TEST_CASE("seal and open_sealed: a round trip under one key, nothing under another or changed") {
  const std::string key = cabin::random_bytes(32), other = cabin::random_bytes(32);
  const std::string plain = R"({"secret":"s3cr3t","ca":"-----BEGIN-----"})";
  auto sealed = cabin::seal(key, plain);
  REQUIRE(sealed);
  CHECK(sealed->find("s3cr3t") == std::string::npos);
  CHECK(cabin::seal(key, plain) != sealed);  // a fresh nonce each time
  CHECK(cabin::open_sealed(key, *sealed) == plain);
  CHECK_FALSE(cabin::open_sealed(other, *sealed));
  CHECK_FALSE(cabin::open_sealed(key.substr(0, 16), *sealed));
  std::string changed = *sealed;
  changed[changed.size() / 2] = changed[changed.size() / 2] == 'A' ? 'B' : 'A';
  CHECK_FALSE(cabin::open_sealed(key, changed));
  CHECK_FALSE(cabin::open_sealed(key, ""));
  CHECK_FALSE(cabin::open_sealed(key, "not base64url!"));
  CHECK(cabin::open_sealed(key, *cabin::seal(key, "")) == std::string());
  // Bound to a context, it opens with that context only.
  auto bound = cabin::seal(key, plain, "cabin profile prf_a");
  REQUIRE(bound);
  CHECK(cabin::open_sealed(key, *bound, "cabin profile prf_a") == plain);
  CHECK_FALSE(cabin::open_sealed(key, *bound, "cabin profile prf_b"));
  CHECK_FALSE(cabin::open_sealed(key, *bound));
  CHECK_FALSE(cabin::open_sealed(key, *sealed, "cabin profile prf_a"));
}
