// ImageManifest: what vm-images/build-image wrote into manifest.json, parsed and checked against
// the files of the image dir.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin::drivers {

// The manifest layout this driver reads; build-image writes the same number.
inline constexpr int kImageFormat = 1;
inline constexpr const char* kImageKernel = "vmlinuz";
inline constexpr const char* kImageInitramfs = "initramfs.cpio.gz";
inline constexpr const char* kImageRootfs = "rootfs.erofs";

struct ImageFile {
  uint64_t size = 0;
  std::string sha256;
};

struct ImageManifest {
  int format = 0;
  std::string input_hash;
  std::string built_at;
  std::string kernel_version;
  std::map<std::string, std::string> packages;  // name → Debian version
  std::map<std::string, ImageFile> files;       // vmlinuz, initramfs.cpio.gz, rootfs.erofs
};

// Parses manifest.json; kInvalidArgument naming the first missing or malformed field.
Result<ImageManifest> parse_image_manifest(std::string_view json);

// Reads <dir>/manifest.json and checks that each file it lists exists with the recorded size
// (no hashing: the rootfs is hundreds of MiB and this runs at every start).
Result<ImageManifest> load_image(const std::filesystem::path& dir);

}  // namespace cabin::drivers
