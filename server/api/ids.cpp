#include "server/api/ids.h"

#include "common/crypto.h"

namespace cabin::api {

namespace {

std::string random_id(std::string_view prefix) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string raw = random_bytes(kSessionIdRandomChars);
  std::string id(prefix);
  // 252 = 7 * 36: values past it would bias the alphabet, so they are redrawn.
  for (size_t i = 0; id.size() < prefix.size() + kSessionIdRandomChars; ++i) {
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
  for (char c : id.substr(prefix.size())) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

}  // namespace

std::string new_session_id() { return random_id(kSessionIdPrefix); }
bool valid_session_id(std::string_view id) { return valid_id(id, kSessionIdPrefix); }
std::string new_preview_id() { return random_id(kPreviewIdPrefix); }
bool valid_preview_id(std::string_view id) { return valid_id(id, kPreviewIdPrefix); }
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
