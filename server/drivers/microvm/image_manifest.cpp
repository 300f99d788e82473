#include "server/drivers/microvm/image_manifest.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace cabin::drivers {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The manifest is written by our own build script, but a truncated or hand-edited one must give
// a clear reason rather than a crash.
constexpr size_t kMaxManifestBytes = 1 << 20;

Error bad(const std::string& what) {
  return make_error(Errc::kInvalidArgument, "invalid_image_manifest", "manifest.json: " + what);
}

bool is_hex(const std::string& s, size_t len) {
  if (s.size() != len) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

Result<ImageManifest> parse_image_manifest(std::string_view text) {
  if (text.size() > kMaxManifestBytes) return bad("larger than 1 MiB");
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad("not a JSON object");
  ImageManifest m;
  if (!j.contains("format") || !j["format"].is_number_integer()) return bad("no integer format");
  m.format = j["format"].get<int>();
  if (m.format != kImageFormat)
    return bad("format " + std::to_string(m.format) + ", this cabind reads " +
               std::to_string(kImageFormat) + " (rebuild the image)");
  auto str = [&](const json& o, const char* key, std::string& out) {
    if (!o.contains(key) || !o[key].is_string()) return false;
    out = o[key].get<std::string>();
    return true;
  };
  if (!str(j, "input_hash", m.input_hash) || !is_hex(m.input_hash, 64))
    return bad("input_hash is not a sha256");
  if (!str(j, "built_at", m.built_at)) return bad("no built_at");
  if (!j.contains("kernel") || !j["kernel"].is_object() ||
      !str(j["kernel"], "version", m.kernel_version) || m.kernel_version.empty())
    return bad("no kernel.version");
  if (j.contains("packages")) {
    if (!j["packages"].is_object()) return bad("packages is not an object");
    for (const auto& [name, v] : j["packages"].items()) {
      if (!v.is_string()) return bad("packages." + name + " is not a string");
      m.packages[name] = v.get<std::string>();
    }
  }
  if (!j.contains("files") || !j["files"].is_object()) return bad("no files");
  for (const char* name : {kImageKernel, kImageInitramfs, kImageRootfs}) {
    const json& files = j["files"];
    if (!files.contains(name) || !files[name].is_object())
      return bad(std::string("no files.") + name);
    const json& f = files[name];
    ImageFile file;
    if (!f.contains("size") || !f["size"].is_number_unsigned() || f["size"].get<uint64_t>() == 0)
      return bad(std::string("files.") + name + ".size is not a positive integer");
    file.size = f["size"].get<uint64_t>();
    if (!str(f, "sha256", file.sha256) || !is_hex(file.sha256, 64))
      return bad(std::string("files.") + name + ".sha256 is not a sha256");
    m.files[name] = file;
  }
  return m;
}

Result<ImageManifest> load_image(const fs::path& dir) {
  const fs::path path = dir / "manifest.json";
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(Errc::kNotFound, "image_missing",
                      "no " + path.string() + " (build it with vm-images/build-image)");
  std::ostringstream text;
  text << in.rdbuf();
  auto m = parse_image_manifest(text.str());
  if (!m) return m;
  for (const auto& [name, file] : m->files) {
    std::error_code ec;
    const auto size = fs::file_size(dir / name, ec);
    if (ec)
      return make_error(Errc::kNotFound, "image_missing",
                        (dir / name).string() + ": " + ec.message());
    if (size != file.size)
      return make_error(Errc::kInvalidArgument, "image_corrupt",
                        (dir / name).string() + " is " + std::to_string(size) +
                            " bytes, the manifest says " + std::to_string(file.size));
  }
  return m;
}

}  // namespace cabin::drivers
