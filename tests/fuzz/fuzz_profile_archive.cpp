// Fuzz target: the reader of profile archives (their contents come from sandboxes). Whatever it
// accepts stays within the limits, with paths that cannot leave the profile's directory.
#include <cstdint>
#include <string_view>

#include "common/profile_archive.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cabin::profiles::ArchiveLimits limits;
  limits.max_bytes = 4096;
  limits.max_entries = 64;
  limits.max_path = 64;
  limits.max_depth = 4;
  auto r = cabin::profiles::parse(std::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (!r) return 0;
  uint64_t bytes = 0;
  if (r->size() > limits.max_entries) __builtin_trap();
  for (const auto& e : *r) {
    if (e.path.empty() || e.path.front() == '/' || e.path.size() > limits.max_path) __builtin_trap();
    if (e.path == ".." || e.path.starts_with("../") || e.path.find("/../") != std::string::npos ||
        e.path.ends_with("/.."))
      __builtin_trap();
    bytes += e.data.size();
  }
  if (bytes > limits.max_bytes) __builtin_trap();
  return 0;
}
