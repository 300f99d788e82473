#include "server/api/ids.h"

#include "common/crypto.h"

namespace cabin::api {

namespace {

std::string& node_storage() {
  static std::string node;
  return node;
}

bool lower_alnum(std::string_view s) {
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

std::string random_id(std::string_view prefix, std::string_view node = {}) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string raw = random_bytes(kSessionIdRandomChars);
  std::string id(prefix);
  if (!node.empty()) id.append(node).push_back('_');
  const size_t random_from = id.size();
  // 252 = 7 * 36: values past it would bias the alphabet, so they are redrawn.
  for (size_t i = 0; id.size() < random_from + kSessionIdRandomChars; ++i) {
    if (i == raw.size()) {
      raw = random_bytes(kSessionIdRandomChars);
      i = 0;
    }
    auto c = static_cast<unsigned char>(raw[i]);
    if (c < 252) id.push_back(kAlphabet[c % 36]);
  }
  return id;
}

bool valid_id(std::string_view id, std::string_view prefix) {
  if (id.size() != prefix.size() + kSessionIdRandomChars) return false;
  if (id.substr(0, prefix.size()) != prefix) return false;
  return lower_alnum(id.substr(prefix.size()));
}

// "<prefix><random>" or "<prefix><node>_<random>".
bool valid_node_scoped_id(std::string_view id, std::string_view prefix) {
  if (!id.starts_with(prefix)) return false;
  std::string_view rest = id.substr(prefix.size());
  if (rest.size() < kSessionIdRandomChars) return false;
  const std::string_view random = rest.substr(rest.size() - kSessionIdRandomChars);
  std::string_view node = rest.substr(0, rest.size() - kSessionIdRandomChars);
  if (!lower_alnum(random)) return false;
  if (node.empty()) return true;
  if (node.back() != '_') return false;
  node.remove_suffix(1);
  return valid_node_id(node);
}

}  // namespace

bool valid_node_id(std::string_view node) {
  return !node.empty() && node.size() <= kMaxNodeIdChars && lower_alnum(node);
}
void set_node_id(std::string node) { node_storage() = std::move(node); }
const std::string& node_id() { return node_storage(); }

std::string_view node_of_id(std::string_view id) {
  if (!valid_session_id(id) && !valid_preview_id(id)) return {};
  const std::string_view rest = id.substr(kSessionIdPrefix.size());
  const size_t sep = rest.find('_');
  return sep == std::string_view::npos ? std::string_view{} : rest.substr(0, sep);
}

std::string new_session_id() { return random_id(kSessionIdPrefix, node_storage()); }
bool valid_session_id(std::string_view id) {
  return valid_node_scoped_id(id, kSessionIdPrefix);
}
std::string new_preview_id() { return random_id(kPreviewIdPrefix, node_storage()); }
bool valid_preview_id(std::string_view id) { return valid_node_scoped_id(id, kPreviewIdPrefix); }
std::string new_key_id() { return random_id(kKeyIdPrefix); }
bool valid_key_id(std::string_view id) { return valid_id(id, kKeyIdPrefix); }

std::string new_profile_id() { return random_id(kProfileIdPrefix); }
bool valid_profile_id(std::string_view id) { return valid_id(id, kProfileIdPrefix); }

std::string new_recording_id() { return random_id(kRecordingIdPrefix); }
bool valid_recording_id(std::string_view id) { return valid_id(id, kRecordingIdPrefix); }

bool valid_target_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '-')) {
      return false;
    }
  }
  return true;
}

bool valid_asset_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

}  // namespace cabin::api
