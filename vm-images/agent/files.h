// The sandbox's files as the API reaches them (agent_protocol::kFilesPath): only below the
// sandbox user's home and /tmp, every path opened with openat2(RESOLVE_BENEATH) from its root,
// so that neither "..", nor a symlink, nor a mount leads out.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "common/agent_protocol.h"
#include "common/result.h"
#include "common/unique_fd.h"

namespace cabin::agent {

class FileRoots {
 public:
  // Asked before a file is given out for reading, with its checked path and what fstat said of
  // the descriptor opened: an error refuses it (the recorder vouches for its own files so).
  using ReadCheck = std::function<Result<void>(const std::string& path, const struct stat& st)>;
  explicit FileRoots(std::vector<std::string> roots, ReadCheck check = {})
      : roots_(std::move(roots)), check_(std::move(check)) {}

  // `path` (checked with agent_protocol::check_file_path) opened with `flags`.
  Result<UniqueFd> open(const std::string& path, int flags) const;
  // A regular file to read, and its size.
  struct Readable {
    UniqueFd fd;
    uint64_t size = 0;
  };
  Result<Readable> open_file(const std::string& path) const;
  Result<std::vector<agent_protocol::FileEntry>> list(const std::string& dir) const;
  Result<void> remove(const std::string& path) const;

  // A file being written: bytes go to a temporary file beside `path`, which commit() renames
  // over it; dropped without commit(), the temporary file is removed.
  class Upload {
   public:
    Upload() = default;
    Upload(Upload&&) = default;
    Upload& operator=(Upload&&) = default;
    ~Upload();
    Result<void> write(std::string_view bytes);
    Result<void> commit();
    int fd() const { return file_.get(); }

   private:
    friend class FileRoots;
    UniqueFd dir_;
    UniqueFd file_;
    std::string temp_;
    std::string leaf_;
  };
  Result<Upload> create(const std::string& path) const;

 private:
  // The root that holds `path` and the path below it ("." for the root itself).
  Result<std::pair<std::string, std::string>> split(const std::string& path) const;

  std::vector<std::string> roots_;
  ReadCheck check_;
};

}  // namespace cabin::agent
