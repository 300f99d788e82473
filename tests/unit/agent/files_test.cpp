#include "vm-images/agent/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "common/crypto.h"
#include "vm-images/agent/browser_events.h"

using namespace cabin;
using namespace cabin::agent;
namespace fs = std::filesystem;

namespace {

struct Roots {
  fs::path base = fs::temp_directory_path() / ("cabin-files-" + random_hex(6));
  fs::path home = base / "home";
  fs::path outside = base / "outside";
  Roots() {
    fs::create_directories(home / "sub");
    fs::create_directories(outside);
    std::ofstream(outside / "secret") << "host";
    std::ofstream(home / "sub" / "a.txt") << "abc";
  }
  ~Roots() { fs::remove_all(base); }
  FileRoots roots() const { return FileRoots({home.string()}); }
};

std::string code(const Result<FileRoots::Readable>& r) { return r ? "" : r.error().code; }

}  // namespace

TEST_CASE("files: only below a root, never out through a symlink or traversal") {
  Roots t;
  const auto roots = t.roots();
  const std::string home = t.home.string();
  auto ok = roots.open_file(home + "/sub/a.txt");
  REQUIRE(ok);
  CHECK(ok->size == 3);

  fs::create_symlink(t.outside, t.home / "out");
  fs::create_symlink(t.outside / "secret", t.home / "secret-link");
  fs::create_symlink("sub/a.txt", t.home / "inside-link");
  CHECK(code(roots.open_file(home + "/out/secret")) == "path_not_allowed");
  CHECK(code(roots.open_file(home + "/secret-link")) == "path_not_allowed");
  CHECK(code(roots.open_file(t.outside.string() + "/secret")) == "path_not_allowed");
  CHECK(code(roots.open_file(home + "/../outside/secret")) == "invalid_request");
  CHECK(code(roots.open_file(home + "/nothing")) == "file_not_found");
  CHECK(code(roots.open_file(home + "/sub")) == "not_a_file");
  // A link as the last part is not followed, even one that stays inside.
  CHECK(code(roots.open_file(home + "/inside-link")) == "path_not_allowed");
  CHECK_FALSE(roots.list(home + "/out"));
  CHECK_FALSE(roots.remove(home + "/out/secret"));
  CHECK(fs::exists(t.outside / "secret"));

  auto list = roots.list(home);
  REQUIRE(list);
  CHECK(list->size() == 4);
}

TEST_CASE("files: an upload replaces a planted symlink instead of writing through it") {
  Roots t;
  const auto roots = t.roots();
  fs::create_symlink(t.outside / "secret", t.home / "link");
  auto up = roots.create(t.home.string() + "/link");
  REQUIRE(up);
  REQUIRE(up->write("mine"));
  REQUIRE(up->commit());
  CHECK_FALSE(fs::is_symlink(t.home / "link"));
  std::ifstream in(t.outside / "secret");
  std::string host;
  in >> host;
  CHECK(host == "host");
  CHECK_FALSE(roots.create(t.home.string() + "/out-of/x"));
  CHECK_FALSE(roots.create(t.home.string()));
}

TEST_CASE("files: an upload that is not committed leaves nothing behind") {
  Roots t;
  const auto roots = t.roots();
  {
    auto up = roots.create(t.home.string() + "/half");
    REQUIRE(up);
    REQUIRE(up->write("half"));
  }
  CHECK(fs::is_empty(t.home / "sub") == false);
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(t.home)) n += e.path().filename() != "sub";
  CHECK(n == 0);
}

TEST_CASE("a download's suggested name becomes a safe file name") {
  CHECK(safe_file_name("report.pdf") == "report.pdf");
  CHECK(safe_file_name("../../etc/passwd") == "_.._etc_passwd");
  CHECK(safe_file_name("..") == "download");
  CHECK(safe_file_name("") == "download");
  CHECK(safe_file_name("a\nb\x7f") == "a_b_");
  CHECK(safe_file_name(".bashrc") == "bashrc");
  const std::string long_name = std::string(199, 'a') + "é";  // é straddles byte 200
  CHECK(safe_file_name(long_name) == std::string(199, 'a'));
}
