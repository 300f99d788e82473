// Ids and names from request paths: a fixed alphabet and length, checked at the edge before one
// reaches a path, a query or a lookup.
#pragma once

#include <string>
#include <string_view>

namespace cabin::api {

inline constexpr std::string_view kSessionIdPrefix = "ses_";
inline constexpr size_t kSessionIdRandomChars = 20;  // [a-z0-9], ~103 bits

// A node of several behind cabin-gateway (--node-id): [a-z0-9]{1,16}. Session and preview ids
// made after set_node_id() carry it, "ses_<node>_<random>", so the gateway finds the node from
// the id alone; without one they are "ses_<random>".
inline constexpr size_t kMaxNodeIdChars = 16;
bool valid_node_id(std::string_view node);
// Once, at start, before any id is made.
void set_node_id(std::string node);
const std::string& node_id();
// The node part of a session or preview id; empty when it has none.
std::string_view node_of_id(std::string_view id);
// The longest session id there is.
inline constexpr size_t kMaxSessionIdChars =
    kSessionIdPrefix.size() + kMaxNodeIdChars + 1 + kSessionIdRandomChars;

std::string new_session_id();
bool valid_session_id(std::string_view id);
// Preview ids: "prv_" and 20 of [a-z0-9] (with the node, as session ids); they name a preview
// in paths (/preview/<id>/).
inline constexpr std::string_view kPreviewIdPrefix = "prv_";
std::string new_preview_id();
bool valid_preview_id(std::string_view id);
// Tenant API key ids: "key_" and 20 of [a-z0-9]; they name a key in paths (/v1/keys/<id>), the
// audit log and session owners.
inline constexpr std::string_view kKeyIdPrefix = "key_";
std::string new_key_id();
bool valid_key_id(std::string_view id);
// Profile ids: "prf_" and 20 of [a-z0-9]; they name a browser profile in paths (/v1/profiles/<id>).
inline constexpr std::string_view kProfileIdPrefix = "prf_";
std::string new_profile_id();
bool valid_profile_id(std::string_view id);
// Recording ids: "rec_" and 20 of [a-z0-9]; they name a recording in paths and its files.
inline constexpr std::string_view kRecordingIdPrefix = "rec_";
std::string new_recording_id();
bool valid_recording_id(std::string_view id);
// Chromium target ids are 32 upper-case hex digits; accept [A-Za-z0-9] up to 64.
bool valid_target_id(std::string_view id);
// Web UI file names under /ui/: [A-Za-z0-9._-], at most 128, no leading dot.
bool valid_asset_name(std::string_view name);

}  // namespace cabin::api
