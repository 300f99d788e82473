#include "server/http/static_files.h"

#include <fstream>
#include <iterator>

#include "common/log.h"
#include "server/api/ids.h"

namespace cabin::http_api {
namespace {

const auto& files_log() {
  static auto l = logger("ui");
  return l;
}

// Only what the pages need: scripts and styles from cabind itself, WebSockets back to it,
// images from the canvas (screenshots are blobs); no frames, no plugins, no inline code.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

std::string etag_of(std::string_view body) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across runs, enough to tell versions
  for (unsigned char c : body) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[19];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return "\"" + std::string(buf) + "-" + std::to_string(body.size()) + "\"";
}

bool etag_matches(std::string_view header, std::string_view etag) {
  // If-None-Match: a list of entity tags, or "*"; weak tags compare by their opaque part.
  size_t pos = 0;
  while (pos < header.size()) {
    size_t comma = header.find(',', pos);
    std::string_view tag = header.substr(pos, comma == std::string_view::npos ? comma : comma - pos);
    while (!tag.empty() && (tag.front() == ' ' || tag.front() == '\t')) tag.remove_prefix(1);
    while (!tag.empty() && (tag.back() == ' ' || tag.back() == '\t')) tag.remove_suffix(1);
    if (tag.rfind("W/", 0) == 0) tag.remove_prefix(2);
    if (tag == "*" || tag == etag) return true;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return false;
}

}  // namespace

std::string_view content_type_for(std::string_view name) {
  static const std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".map", "application/json"},
      {".json", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".woff2", "font/woff2"},
      {".txt", "text/plain; charset=utf-8"},
  };
  for (const auto& [ext, type] : kTypes) {
    if (name.size() > ext.size() && name.substr(name.size() - ext.size()) == ext) return type;
  }
  return {};
}

Result<StaticFiles> StaticFiles::load(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return make_error(Errc::kUnavailable, "web_ui_unavailable",
                      "no web UI build in " + dir.string() +
                          ": build it with `cmake --build build --target web-ui` (it needs node "
                          "and the npm packages: `npm ci`), or give --web-ui-dir a directory "
                          "that `node web-ui/build.mjs --out DIR` made");
  }
  StaticFiles out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    // symlink_status: a link is never followed out of the build dir.
    if (!fs::is_regular_file(entry.symlink_status(ec)) || !api::valid_asset_name(name)) continue;
    auto type = content_type_for(name);
    if (type.empty()) continue;
    if (out.files_.size() >= kMaxStaticFiles) {
      return make_error(Errc::kInternal, "web_ui_too_large",
                        "more than " + std::to_string(kMaxStaticFiles) + " files in " +
                            dir.string());
    }
    auto size = entry.file_size(ec);
    if (ec || size > kMaxStaticFileBytes) {
      return make_error(Errc::kInternal, "web_ui_too_large",
                        entry.path().string() + " is missing or larger than 8 MiB");
    }
    std::ifstream in(entry.path(), std::ios::binary);
    std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      return make_error(Errc::kInternal, "web_ui_read", "cannot read " + entry.path().string());
    }
    StaticFile f;
    f.content_type = std::string(type);
    f.etag = etag_of(body);
    f.immutable = type.rfind("text/html", 0) != 0;
    f.body = std::move(body);
    out.files_.emplace(std::move(name), std::move(f));
  }
  if (ec) return make_error(Errc::kInternal, "web_ui_read", "cannot list " + dir.string());
  files_log()->debug("web UI: {} files from {}", out.files_.size(), dir.string());
  return out;
}

const StaticFile* StaticFiles::find(std::string_view name) const {
  auto it = files_.find(name);
  return it == files_.end() ? nullptr : &it->second;
}

Response static_response(const StaticFile& file, std::string_view if_none_match,
                         PageCache page_cache) {
  bool no_store = !file.immutable && page_cache == PageCache::kNoStore;
  bool not_modified = !no_store && !if_none_match.empty() && etag_matches(if_none_match, file.etag);
  Response res{not_modified ? http::status::not_modified : http::status::ok, 11};
  res.set(http::field::server, "cabind/" CABIN_VERSION);
  res.set(http::field::content_type, file.content_type);
  if (file.immutable) {
    res.set(http::field::cache_control, "public, max-age=31536000, immutable");
  } else if (no_store) {
    res.set(http::field::cache_control, "no-store");
  } else {
    res.set(http::field::cache_control, "no-cache");
  }
  if (!no_store) res.set(http::field::etag, file.etag);
  res.set("Content-Security-Policy", kContentSecurityPolicy);
  res.set("X-Content-Type-Options", "nosniff");
  res.set("X-Frame-Options", "DENY");
  res.set("Referrer-Policy", "no-referrer");
  res.set("Cross-Origin-Opener-Policy", "same-origin");
  if (!not_modified) res.body() = file.body;
  res.prepare_payload();
  return res;
}

}  // namespace cabin::http_api
