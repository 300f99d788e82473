// StaticFiles: the web UI's built files (web-ui/build.mjs), read into memory once at start and
// served by exact name, so a request can only ever name a file the build produced.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "common/result.h"
#include "server/http/responses.h"

namespace cabin::http_api {

// Bounds on what load() accepts: the UI is a handful of files, the largest (noVNC and the live
// view) about 200 KiB.
inline constexpr size_t kMaxStaticFiles = 64;
inline constexpr size_t kMaxStaticFileBytes = 8u << 20;

struct StaticFile {
  std::string content_type;
  std::string body;
  std::string etag;  // quoted, strong; from the content
  // The build names every asset but the HTML pages by its content hash: such a name never
  // changes meaning, so browsers may keep it for good.
  bool immutable = false;
};

// How a page may be cached: the console revalidates (ETag); pages whose URL carries a token are
// never stored.
enum class PageCache { kRevalidate, kNoStore };

class StaticFiles {
 public:
  StaticFiles() = default;

  // Reads every regular file directly in `dir` whose name is plain ([A-Za-z0-9._-], no leading
  // dot) and whose extension has a known content type; skips the rest (symlinks and folders
  // too). A missing dir is an error the caller reports; the server runs on without a UI.
  static Result<StaticFiles> load(const std::filesystem::path& dir);

  const StaticFile* find(std::string_view name) const;
  size_t size() const { return files_.size(); }

 private:
  std::map<std::string, StaticFile, std::less<>> files_;
};

// The content type for a file name's extension, or "" when the UI serves no such files.
std::string_view content_type_for(std::string_view name);

// The answer for one file: 304 when If-None-Match matches, else the bytes; with the UI's
// security headers (CSP and friends) and its caching policy.
Response static_response(const StaticFile& file, std::string_view if_none_match,
                         PageCache page_cache = PageCache::kRevalidate);

}  // namespace cabin::http_api
