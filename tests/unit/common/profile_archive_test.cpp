// The profile archive: what a sandbox leaves in its profile directory is packed without following
// anything out of it, and an archive is unpacked only below its directory, within the limits.
#include "common/profile_archive.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/fakes/temp_dir.h"

namespace fs = std::filesystem;
using namespace cabin::profiles;

namespace {

using cabin::testing::TempDir;



void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("a profile tree packs and unpacks to the same directories and files", "[profiles]") {
  TempDir from, to;
  fs::create_directories(from.path / "Default" / "Local Storage" / "leveldb");
  write(from.path / "Local State", "{\"a\":1}");
  write(from.path / "Default" / "Cookies", std::string(100000, 'c'));
  write(from.path / "Default" / "Local Storage" / "leveldb" / "000003.log", "item");
  auto packed = pack(from.path);
  REQUIRE(packed.ok());
  auto again = pack(from.path);
  REQUIRE(again.ok());
  CHECK(*again == *packed);  // the same tree packs the same way
  REQUIRE(unpack(*packed, to.path).ok());
  CHECK(read(to.path / "Local State") == "{\"a\":1}");
  CHECK(read(to.path / "Default" / "Cookies") == std::string(100000, 'c'));
  CHECK(read(to.path / "Default" / "Local Storage" / "leveldb" / "000003.log") == "item");
  struct stat st {};
  REQUIRE(::stat((to.path / "Default" / "Cookies").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("packing follows no link and takes no socket, FIFO or device", "[profiles]") {
  TempDir from, outside, to;
  write(outside.path / "secret", "host file");
  fs::create_symlink(outside.path / "secret", from.path / "link");
  fs::create_directory_symlink(outside.path, from.path / "dirlink");
  REQUIRE(::mkfifo((from.path / "fifo").c_str(), 0600) == 0);
  write(from.path / "kept", "yes");
  auto packed = pack(from.path);
  REQUIRE(packed.ok());
  CHECK(packed->find("host file") == std::string::npos);
  auto entries = parse(*packed);
  REQUIRE(entries.ok());
  REQUIRE(entries->size() == 1);
  CHECK((*entries)[0].path == "kept");
}

TEST_CASE("packing stops at the limits with profile_too_large", "[profiles]") {
  TempDir from;
  write(from.path / "big", std::string(2048, 'x'));
  ArchiveLimits small;
  small.max_bytes = 1024;
  auto r = pack(from.path, small);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == "profile_too_large");
  fs::path deep = from.path;
  for (int i = 0; i < 5; ++i) fs::create_directory(deep /= "d");
  ArchiveLimits shallow;
  shallow.max_depth = 3;
  auto d = pack(from.path, shallow);
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().code == "profile_too_large");
}

TEST_CASE("an archive that would write outside its directory, or is cut, is refused whole",
          "[profiles]") {
  const auto entry = [](char type, const std::string& path, const std::string& data = "") {
    std::string e(1, type);
    e.push_back(static_cast<char>(path.size() >> 8));
    e.push_back(static_cast<char>(path.size() & 0xff));
    e += path;
    if (type == 2) {
      for (int i = 7; i >= 0; --i) e.push_back(static_cast<char>((data.size() >> (8 * i)) & 0xff));
      e += data;
    }
    return e;
  };
  const std::string magic = "CABINPF1", end(1, '\0');
  for (const std::string& bad : {
           magic + entry(2, "../escape", "x") + end,
           magic + entry(2, "/etc/passwd", "x") + end,
           magic + entry(2, "a/./b", "x") + end,
           magic + entry(2, "nodir/file", "x") + end,  // its directory never listed
           magic + entry(1, "d") + entry(1, "d") + end,  // twice
           magic + entry(2, "f", "x"),                   // no end
           magic + entry(2, "f", "x") + end + "junk",
           magic + entry(2, "f", "xyz").substr(0, 12) + end,  // cut file
           std::string("CABINPF0") + end,
       }) {
    TempDir to;
    CHECK_FALSE(parse(bad).ok());
    CHECK_FALSE(unpack(bad, to.path).ok());
    CHECK(fs::is_empty(to.path));
  }
  TempDir to;
  const std::string good = magic + entry(1, "d") + entry(2, "d/f", "ok") + end;
  REQUIRE(unpack(good, to.path).ok());
  CHECK(read(to.path / "d" / "f") == "ok");
}

TEST_CASE("a profile disk holds one archive with its length, and says when there is none",
          "[profiles]") {
  TempDir dir;
  const fs::path disk = dir.path / "profile.img";
  const int fd = ::open(disk.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 8 + 64) == 0);
  auto none = read_disk(fd, 1 << 20);
  REQUIRE(none.ok());
  CHECK(none->empty());  // a zeroed disk holds no profile

  REQUIRE(write_disk(fd, std::string(40, 'a')).ok());
  REQUIRE(write_disk(fd, std::string(20, 'b')).ok());  // the later one replaces it
  auto back = read_disk(fd, 1 << 20);
  REQUIRE(back.ok());
  CHECK(*back == std::string(20, 'b'));

  auto over = write_disk(fd, std::string(65, 'c'));  // one byte past the disk
  REQUIRE(!over.ok());
  CHECK(over.error().errc == cabin::Errc::kTooLarge);
  CHECK(read_disk(fd, 19).error().errc == cabin::Errc::kTooLarge);  // over the reader's bound

  // A length past the disk's end, as a hostile guest could write it, is refused.
  const unsigned char huge[8] = {0, 0, 0, 0, 0, 0, 1, 0};
  REQUIRE(::pwrite(fd, huge, sizeof huge, 0) == 8);
  CHECK(read_disk(fd, 1 << 20).error().errc == cabin::Errc::kTooLarge);

  // A disk for no profile (0 bytes) holds none, and takes none.
  REQUIRE(::ftruncate(fd, 0) == 0);
  CHECK(read_disk(fd, 1 << 20)->empty());
  CHECK(!write_disk(fd, "x").ok());
  ::close(fd);
}
