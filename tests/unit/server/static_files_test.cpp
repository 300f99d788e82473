#include "server/http/static_files.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "tests/fakes/temp_dir.h"

using namespace cabin;
using namespace cabin::http_api;
namespace fs = std::filesystem;

namespace {

using cabin::testing::TempDir;

void write_file(const TempDir& dir, const std::string& name, const std::string& body) {
  std::ofstream(dir.path / name, std::ios::binary) << body;
}

}  // namespace

TEST_CASE("the web UI is read once, and only plain files of known types") {
  TempDir dir, outside;
  write_file(dir, "index.html", "<!doctype html><p>console</p>");
  write_file(dir, "live-ABC123.js", "console.log(1)");
  write_file(dir, "style-XYZ.css", "body{}");
  write_file(dir, ".hidden.js", "no");
  write_file(dir, "notes.md", "unknown type");
  write_file(dir, "a b.js", "odd name");
  write_file(outside, "secret.js", "must not be served");
  fs::create_symlink(outside.path / "secret.js", dir.path / "link.js");
  fs::create_directory(dir.path / "sub");
  write_file(dir, "sub/inner.js", "not flat");

  auto ui = StaticFiles::load(dir.path);
  REQUIRE(ui);
  CHECK(ui->size() == 3);
  REQUIRE(ui->find("index.html"));
  CHECK(ui->find("index.html")->content_type == "text/html; charset=utf-8");
  CHECK_FALSE(ui->find("index.html")->immutable);
  REQUIRE(ui->find("live-ABC123.js"));
  CHECK(ui->find("live-ABC123.js")->content_type == "text/javascript; charset=utf-8");
  CHECK(ui->find("live-ABC123.js")->immutable);
  CHECK(ui->find("style-XYZ.css")->content_type == "text/css; charset=utf-8");
  for (const char* name : {".hidden.js", "notes.md", "a b.js", "link.js", "sub", "sub/inner.js",
                           "../secret.js", ""}) {
    INFO(name);
    CHECK(ui->find(name) == nullptr);
  }

  // Read at load: later changes on disk do not reach requests.
  write_file(dir, "index.html", "changed");
  CHECK(ui->find("index.html")->body == "<!doctype html><p>console</p>");
}

TEST_CASE("a missing web UI build is a clear error") {
  auto ui = StaticFiles::load("/nonexistent/cabin-web-ui");
  REQUIRE_FALSE(ui);
  CHECK(ui.error().code == "web_ui_unavailable");
  CHECK_THAT(ui.error().message, Catch::Contains("/nonexistent/cabin-web-ui"));
}

TEST_CASE("static answers carry type, caching, ETag and the security headers") {
  TempDir dir;
  write_file(dir, "index.html", "<p>hi</p>");
  write_file(dir, "app-H1.js", "x()");
  auto ui = StaticFiles::load(dir.path);
  REQUIRE(ui);

  const auto& page = *ui->find("index.html");
  auto res = static_response(page, "");
  CHECK(res.result() == http::status::ok);
  CHECK(res.body() == "<p>hi</p>");
  CHECK(res[http::field::content_type] == "text/html; charset=utf-8");
  CHECK(res[http::field::cache_control] == "no-cache");
  CHECK(res[http::field::etag] == page.etag);
  CHECK_THAT(std::string(res["Content-Security-Policy"]), Catch::Contains("script-src 'self'"));
  CHECK_THAT(std::string(res["Content-Security-Policy"]),
             Catch::Contains("frame-ancestors 'none'"));
  CHECK(res["X-Content-Type-Options"] == "nosniff");
  CHECK(res["Referrer-Policy"] == "no-referrer");

  auto again = static_response(page, "\"other\", " + page.etag);
  CHECK(again.result() == http::status::not_modified);
  CHECK(again.body().empty());
  CHECK(static_response(page, "W/" + page.etag).result() == http::status::not_modified);
  CHECK(static_response(page, "\"other\"").result() == http::status::ok);

  // A page whose URL carries a token is never stored, and never answered 304.
  auto live = static_response(page, page.etag, PageCache::kNoStore);
  CHECK(live.result() == http::status::ok);
  CHECK(live[http::field::cache_control] == "no-store");
  CHECK(live.find(http::field::etag) == live.end());

  auto js = static_response(*ui->find("app-H1.js"), "");
  CHECK(js[http::field::cache_control] == "public, max-age=31536000, immutable");
  CHECK(js[http::field::content_type] == "text/javascript; charset=utf-8");

  // Different content, different tag.
  write_file(dir, "index.html", "<p>bye</p>");
  auto ui2 = StaticFiles::load(dir.path);
  REQUIRE(ui2);
  CHECK(ui2->find("index.html")->etag != page.etag);
}

TEST_CASE("content types come from a fixed table") {
  CHECK(content_type_for("a.js") == "text/javascript; charset=utf-8");
  CHECK(content_type_for("a.svg") == "image/svg+xml");
  CHECK(content_type_for("a.exe").empty());
  CHECK(content_type_for(".js").empty());
  CHECK(content_type_for("js").empty());
}
