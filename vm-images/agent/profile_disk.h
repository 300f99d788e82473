// A microVM's profile disk: the profile cabind gives the session's browser, read once before
// Chromium starts, and where the agent leaves the profile when the browser has closed, for
// cabind to read back from the disk's file on the host (common/profile_archive.h's format).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/result.h"

namespace cabin::agent {

// Unpacks the profile on `disk` into `dir`, made here (0700) unless it exists empty. A disk
// with no profile leaves `dir` as it is.
Result<void> load_profile_disk(const std::string& disk, const std::filesystem::path& dir);

// Packs `dir` (caches left out) onto `disk`: the archive's size. kTooLarge when it does not fit.
Result<uint64_t> save_profile_disk(const std::string& disk, const std::filesystem::path& dir);

}  // namespace cabin::agent
