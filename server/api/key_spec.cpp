#include "server/api/key_spec.h"

#include "common/json_fields.h"

namespace cabin::api {
namespace {

// A name is shown in lists and logs: printable, short, no quoting needed.
bool plain_name(std::string_view s) {
  if (s.empty() || s.size() > kMaxKeyNameBytes || s.front() == ' ' || s.back() == ' ') return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == ' ' || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<KeySpec> parse_key_spec(std::string_view body) {
  auto j = parse_object(body);
  if (!j) return j.error();
  CABIN_TRY(
      reject_unknown(*j, {"name", "max_sessions", "max_creates_per_minute", "max_memory_mb",
                          "max_vcpus", "max_recordings_mb", "max_profiles", "max_profiles_mb"}));
  KeySpec spec;
  auto name = j->find("name");
  if (name == j->end()) return invalid_field("name", "required");
  CABIN_ASSIGN_OR_RETURN(spec.name, read_string(*name, "name", kMaxKeyNameBytes));
  if (!plain_name(spec.name)) {
    return invalid_field("name", "1 to 64 of letters, digits, space, '.', '_' and '-'");
  }
  if (auto it = j->find("max_sessions"); it != j->end()) {
    CABIN_ASSIGN_OR_RETURN(auto n, read_int(*it, "max_sessions", 1, kMaxKeyQuota));
    spec.max_sessions = static_cast<int>(n);
  }
  if (auto it = j->find("max_creates_per_minute"); it != j->end()) {
    CABIN_ASSIGN_OR_RETURN(auto n, read_int(*it, "max_creates_per_minute", 1, kMaxKeyQuota));
    spec.max_creates_per_minute = static_cast<int>(n);
  }
  if (auto it = j->find("max_memory_mb"); it != j->end()) {
    CABIN_ASSIGN_OR_RETURN(spec.max_memory_mb, read_int(*it, "max_memory_mb", 512, kMaxKeyMb));
  }
  if (auto it = j->find("max_vcpus"); it != j->end()) {
    CABIN_ASSIGN_OR_RETURN(auto n, read_int(*it, "max_vcpus", 1, kMaxKeyQuota));
    spec.max_vcpus = static_cast<int>(n);
  }
  if (auto it = j->find("max_recordings_mb"); it != j->end()) {
    CABIN_ASSIGN_OR_RETURN(spec.max_recordings_mb,
                           read_int(*it, "max_recordings_mb", 1, kMaxKeyMb));
  }
  if (auto it = j->find("max_profiles"); it != j->end()) {
    CABIN_ASSIGN_OR_RETURN(auto n, read_int(*it, "max_profiles", 1, kMaxKeyQuota));
    spec.max_profiles = static_cast<int>(n);
  }
  if (auto it = j->find("max_profiles_mb"); it != j->end()) {
    CABIN_ASSIGN_OR_RETURN(spec.max_profiles_mb, read_int(*it, "max_profiles_mb", 1, kMaxKeyMb));
  }
  return spec;
}

}  // namespace cabin::api
