#include "server/api/errors.h"

#include <array>

namespace cabin::api {
namespace {

constexpr std::array kCatalogue{
    ErrorKind{"invalid_json", Errc::kInvalidArgument},
    ErrorKind{"invalid_request", Errc::kInvalidArgument},
    ErrorKind{"unknown_field", Errc::kInvalidArgument},
    ErrorKind{"unknown_action", Errc::kInvalidArgument},
    ErrorKind{"limit_exceeded", Errc::kInvalidArgument},
    ErrorKind{"unknown_driver", Errc::kInvalidArgument},
    ErrorKind{"bad_query", Errc::kInvalidArgument},
    ErrorKind{"bad_request", Errc::kInvalidArgument},
    ErrorKind{"spawn_failed", Errc::kInvalidArgument},
    ErrorKind{"websocket_required", Errc::kInvalidArgument},
    ErrorKind{"bad_host", Errc::kInvalidArgument},
    ErrorKind{"bad_target", Errc::kInvalidArgument},
    ErrorKind{"bad_transfer_encoding", Errc::kInvalidArgument},
    ErrorKind{"token_in_url", Errc::kInvalidArgument},
    ErrorKind{"unauthenticated", Errc::kUnauthenticated},
    ErrorKind{"invalid_token", Errc::kUnauthenticated},
    ErrorKind{"token_expired", Errc::kUnauthenticated},
    ErrorKind{"token_revoked", Errc::kUnauthenticated},
    ErrorKind{"token_scope", Errc::kPermissionDenied},
    ErrorKind{"admin_only", Errc::kPermissionDenied},
    ErrorKind{"cross_origin", Errc::kPermissionDenied},
    ErrorKind{"service_worker_refused", Errc::kPermissionDenied},
    ErrorKind{"not_found", Errc::kNotFound},
    ErrorKind{"file_not_found", Errc::kNotFound},
    ErrorKind{"recording_not_found", Errc::kNotFound},
    ErrorKind{"too_many_recordings", Errc::kConflict},
    ErrorKind{"path_not_allowed", Errc::kPermissionDenied},
    ErrorKind{"not_a_directory", Errc::kInvalidArgument},
    ErrorKind{"not_a_file", Errc::kInvalidArgument},
    ErrorKind{"length_required", Errc::kInvalidArgument},
    ErrorKind{"upload_incomplete", Errc::kInvalidArgument},
    ErrorKind{"upload_too_large", Errc::kTooLarge},
    ErrorKind{"disk_full", Errc::kTooLarge},
    ErrorKind{"file_too_large", Errc::kTooLarge},
    ErrorKind{"transfer_failed", Errc::kBadGateway},
    ErrorKind{"session_not_found", Errc::kNotFound},
    ErrorKind{"session_ended", Errc::kNotFound},
    ErrorKind{"preview_not_found", Errc::kNotFound},
    ErrorKind{"key_not_found", Errc::kNotFound},
    ErrorKind{"profile_not_found", Errc::kNotFound},
    ErrorKind{"method_not_allowed", Errc::kMethodNotAllowed},
    ErrorKind{"too_many_previews", Errc::kConflict},
    ErrorKind{"session_paused", Errc::kConflict},
    ErrorKind{"profile_in_use", Errc::kConflict},
    ErrorKind{"cannot_pause", Errc::kConflict},
    ErrorKind{"idempotency_in_progress", Errc::kConflict},
    ErrorKind{"human_in_control", Errc::kConflict},
    ErrorKind{"control_not_yours", Errc::kPermissionDenied},
    ErrorKind{"idempotency_key_reused", Errc::kUnprocessable},
    ErrorKind{"body_too_large", Errc::kTooLarge},
    ErrorKind{"clipboard_too_large", Errc::kTooLarge},
    ErrorKind{"uri_too_long", Errc::kUriTooLong},
    ErrorKind{"unknown_host", Errc::kMisdirected},
    ErrorKind{"too_many_connections", Errc::kTooManyRequests},
    ErrorKind{"too_many_streams", Errc::kTooManyRequests},
    ErrorKind{"quota_sessions", Errc::kTooManyRequests},
    ErrorKind{"quota_memory", Errc::kTooManyRequests},
    ErrorKind{"quota_vcpus", Errc::kTooManyRequests},
    ErrorKind{"quota_recordings", Errc::kTooManyRequests},
    ErrorKind{"quota_profiles", Errc::kTooManyRequests},
    ErrorKind{"rate_creates", Errc::kTooManyRequests},
    ErrorKind{"headers_too_large", Errc::kHeadersTooLarge},
    ErrorKind{"agent_error", Errc::kBadGateway},
    ErrorKind{"navigation_failed", Errc::kBadGateway},
    ErrorKind{"browser_handshake", Errc::kBadGateway},
    ErrorKind{"bad_discovery", Errc::kBadGateway},
    ErrorKind{"connect_failed", Errc::kBadGateway},
    ErrorKind{"preview_unreachable", Errc::kBadGateway},
    ErrorKind{"preview_bad_answer", Errc::kBadGateway},
    ErrorKind{"web_ui_unavailable", Errc::kUnavailable},
    ErrorKind{"driver_unavailable", Errc::kUnavailable},
    ErrorKind{"sandbox_unavailable", Errc::kUnavailable},
    ErrorKind{"capacity", Errc::kUnavailable},
    ErrorKind{"capacity_memory", Errc::kUnavailable},
    ErrorKind{"state_disk_full", Errc::kUnavailable},
    ErrorKind{"draining", Errc::kUnavailable},
    ErrorKind{"not_ready", Errc::kUnavailable},
    ErrorKind{"node_unavailable", Errc::kUnavailable},
    ErrorKind{"key_in_file", Errc::kConflict},
    ErrorKind{"sandbox_ended", Errc::kUnavailable},
    ErrorKind{"sandbox_hibernated", Errc::kUnavailable},
    ErrorKind{"agent_not_ready", Errc::kUnavailable},
    ErrorKind{"cgroups_failed", Errc::kUnavailable},
    ErrorKind{"vmm_jail", Errc::kUnavailable},
    ErrorKind{"no_egress", Errc::kUnavailable},
    ErrorKind{"preview_timeout", Errc::kTimeout},
};

// The constructors below may only make catalogued codes; checked at compile time.
consteval Errc errc_of(std::string_view code) {
  for (const auto& k : kCatalogue) {
    if (k.code == code) return k.errc;
  }
  throw "not in the error catalogue";
}

#define CABIN_ERROR(code, message) \
  Error { errc_of(code), code, message }

}  // namespace

std::span<const ErrorKind> error_catalogue() { return kCatalogue; }

namespace errors {

Error bad_request(std::string message) { return CABIN_ERROR("bad_request", std::move(message)); }
Error websocket_required(std::string message) {
  return CABIN_ERROR("websocket_required", std::move(message));
}
Error unauthenticated(std::string message) {
  return CABIN_ERROR("unauthenticated", std::move(message));
}
Error spawn_failed(std::string message) { return CABIN_ERROR("spawn_failed", std::move(message)); }
Error bad_host() { return CABIN_ERROR("bad_host", "the Host header is missing or malformed"); }
Error bad_transfer_encoding() {
  return CABIN_ERROR("bad_transfer_encoding", "only Transfer-Encoding: chunked is accepted");
}
Error token_in_url() { return CABIN_ERROR("token_in_url", "open the preview URL with GET first"); }
Error service_worker_refused() {
  return CABIN_ERROR("service_worker_refused",
                     "a path-based preview shares cabind's origin and cannot register a service "
                     "worker; use a host-based preview (--preview-domain)");
}
Error cross_origin() {
  return CABIN_ERROR("cross_origin",
                     "a preview takes WebSocket upgrades and methods other than GET, HEAD and "
                     "OPTIONS only from its own origin");
}
Error not_found_file() { return CABIN_ERROR("not_found", "no such file"); }
Error not_found_endpoint() { return CABIN_ERROR("not_found", "no such endpoint"); }
Error session_paused() {
  return CABIN_ERROR("session_paused",
                     "the session is paused: POST /v1/sessions/{id}/resume continues it");
}

Error cannot_pause(std::string message) { return CABIN_ERROR("cannot_pause", std::move(message)); }

Error no_egress() {
  return CABIN_ERROR("no_egress",
                     "the session's driver gives its sandbox no way out, so it has no network "
                     "policy");
}

Error profile_not_found() { return CABIN_ERROR("profile_not_found", "no such profile"); }

Error recording_not_found() {
  return CABIN_ERROR("recording_not_found", "no recording with that id");
}

Error session_not_found() {
  return CABIN_ERROR("session_not_found", "no live session with that id");
}
Error session_ended(std::string_view why) {
  if (why.empty()) return CABIN_ERROR("session_ended", "the session is ending");
  return CABIN_ERROR("session_ended", "the session ended: " + std::string(why));
}
Error preview_not_found(std::string message) {
  return CABIN_ERROR("preview_not_found", std::move(message));
}
Error human_in_control(std::string_view holder) {
  return CABIN_ERROR("human_in_control",
                     "input is refused while " + std::string(holder) +
                         " holds control of the session (screenshots still work)");
}
Error control_not_yours(std::string_view holder) {
  return CABIN_ERROR("control_not_yours",
                     std::string(holder) +
                         " holds control, taken with an API key: a live view's token cannot "
                         "release it; the key's caller releases it, or it runs out");
}
Error body_too_large(std::string_view limit) {
  return CABIN_ERROR("body_too_large", "the request body exceeds " + std::string(limit));
}
Error uri_too_long(std::string_view limit) {
  return CABIN_ERROR("uri_too_long", "the request line exceeds " + std::string(limit));
}
Error unknown_host(std::string_view host) {
  return CABIN_ERROR("unknown_host",
                     "this server does not serve previews for host " + std::string(host));
}
Error headers_too_large(std::string_view limit) {
  return CABIN_ERROR("headers_too_large", "the request headers exceed " + std::string(limit));
}
Error too_many_connections(std::string message) {
  return CABIN_ERROR("too_many_connections", std::move(message));
}
Error too_many_streams(std::string message) {
  return CABIN_ERROR("too_many_streams", std::move(message));
}
Error admin_only() {
  return CABIN_ERROR("admin_only", "only the admin API key manages keys and reads the metrics");
}
Error key_not_found() { return CABIN_ERROR("key_not_found", "no API key with that id"); }
Error quota_sessions(int max, int64_t retry_after_s) {
  Error e = CABIN_ERROR("quota_sessions", "this API key runs its maximum of " +
                                              std::to_string(max) +
                                              " sessions (max_sessions); end one first");
  e.retry_after_s = retry_after_s;
  return e;
}
Error quota_memory(uint64_t max_mb, uint64_t held_mb, uint64_t asked_mb, int64_t retry_after_s) {
  Error e =
      CABIN_ERROR("quota_memory", "this API key's sessions may hold " + std::to_string(max_mb) +
                                      " MiB of memory together (max_memory_mb); they hold " +
                                      std::to_string(held_mb) + " MiB and this one asks for " +
                                      std::to_string(asked_mb) +
                                      ": end a session or ask for less (resources.memory_mb)");
  e.retry_after_s = retry_after_s;
  return e;
}
Error quota_vcpus(int max, int held, int asked, int64_t retry_after_s) {
  Error e = CABIN_ERROR("quota_vcpus", "this API key's sessions may hold " + std::to_string(max) +
                                           " vCPUs together (max_vcpus); they hold " +
                                           std::to_string(held) + " and this one asks for " +
                                           std::to_string(asked) +
                                           ": end a session or ask for fewer (resources.vcpus)");
  e.retry_after_s = retry_after_s;
  return e;
}
Error quota_recordings(uint64_t max_mb, uint64_t held_mb, int64_t asked_mb) {
  return CABIN_ERROR("quota_recordings",
                     "this API key's recordings may take " + std::to_string(max_mb) +
                         " MiB (max_recordings_mb); those kept and running take " +
                         std::to_string(held_mb) + " MiB and this one may take " +
                         std::to_string(asked_mb) +
                         ": delete some (DELETE /v1/sessions/{id}/recordings/{rid}) or ask for "
                         "a smaller max_mb");
}
Error quota_profiles(std::string message) {
  return CABIN_ERROR("quota_profiles", std::move(message));
}
Error capacity_memory(uint64_t limit_mb, uint64_t held_mb, uint64_t asked_mb,
                      int64_t retry_after_s) {
  Error e = CABIN_ERROR(
      "capacity_memory",
      "the sessions on this node hold " + std::to_string(held_mb) + " MiB of memory limits, and " +
          std::to_string(asked_mb) + " MiB more would pass the " + std::to_string(limit_mb) +
          " MiB it gives them (--sessions-memory-percent of its memory); try later, or ask for "
          "less (resources.memory_mb)");
  e.retry_after_s = retry_after_s;
  return e;
}
Error rate_creates(int per_minute, int64_t retry_after_s) {
  Error e = CABIN_ERROR("rate_creates", "this API key creates at most " +
                                            std::to_string(per_minute) +
                                            " sessions a minute (max_creates_per_minute)");
  e.retry_after_s = retry_after_s;
  return e;
}
Error capacity(std::string message, int64_t retry_after_s) {
  Error e = CABIN_ERROR("capacity", std::move(message));
  e.retry_after_s = retry_after_s;
  return e;
}
Error draining() {
  return CABIN_ERROR("draining", "the server is shutting down and takes no new sessions");
}
Error not_ready(std::string message) { return CABIN_ERROR("not_ready", std::move(message)); }
Error node_unavailable(std::string node) {
  return CABIN_ERROR("node_unavailable",
                     "node " + (node.empty() ? std::string("?") : node) +
                         ", which holds this session, does not answer; try again shortly");
}
Error agent_error(std::string message) { return CABIN_ERROR("agent_error", std::move(message)); }
Error navigation_failed(std::string message) {
  return CABIN_ERROR("navigation_failed", std::move(message));
}
Error preview_unreachable(std::string message) {
  return CABIN_ERROR("preview_unreachable", std::move(message));
}
Error preview_bad_answer(std::string message) {
  return CABIN_ERROR("preview_bad_answer", std::move(message));
}
Error web_ui_unavailable() {
  return CABIN_ERROR("web_ui_unavailable",
                     "this cabind has no web UI: build it with `cmake --build build --target "
                     "web-ui` (it needs node and the npm packages: `npm ci`), or start cabind "
                     "with --web-ui-dir pointing at what `node web-ui/build.mjs --out DIR` made");
}
Error preview_timeout(std::string message) {
  return CABIN_ERROR("preview_timeout", std::move(message));
}

}  // namespace errors
}  // namespace cabin::api
