// Every error code cabind answers with, in one table, and a named constructor for each that the
// HTTP layer makes itself. docs/api.md's table of codes is checked against kCatalogue by a test.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin::api {

struct ErrorKind {
  std::string_view code;
  Errc errc;
};

// Codes made by the parsers, auth, the session manager and drivers as well as by the
// constructors below. A code has one status everywhere.
std::span<const ErrorKind> error_catalogue();

namespace errors {

// 400
Error bad_request(std::string message);  // HTTP framing the server cannot parse
Error websocket_required(std::string message = "this endpoint takes a WebSocket upgrade");
Error spawn_failed(std::string message);
Error bad_host();
Error bad_transfer_encoding();
Error token_in_url();
// 401
Error unauthenticated(std::string message);
// 403
Error admin_only();  // a tenant key on a route for the admin key
Error service_worker_refused();
Error cross_origin();
// 404
Error not_found_file();
Error not_found_endpoint();
Error session_not_found();
Error profile_not_found();
Error recording_not_found();
// A session that has ended (`why`: its end reason) or, with an empty `why`, is ending.
Error session_ended(std::string_view why);
Error preview_not_found(std::string message);
Error key_not_found();
// 409
Error session_paused();                   // what needs its sandbox to run
Error cannot_pause(std::string message);  // not now, or not on this driver
Error human_in_control(std::string_view holder);  // /computer input while someone holds control
Error control_not_yours(std::string_view holder);  // a token's release of a key holder's lock
// 413, 414, 421, 431
Error body_too_large(std::string_view limit);
Error uri_too_long(std::string_view limit);
Error unknown_host(std::string_view host);
Error headers_too_large(std::string_view limit);
// 429
Error too_many_connections(std::string message);
Error too_many_streams(std::string message);
// A tenant key over a quota, with an honest Retry-After.
Error quota_sessions(int max, int64_t retry_after_s);
Error quota_memory(uint64_t max_mb, uint64_t held_mb, uint64_t asked_mb, int64_t retry_after_s);
Error quota_vcpus(int max, int held, int asked, int64_t retry_after_s);
// What a key's recordings or saved profiles may take of the state dir (no Retry-After: only a
// deletion makes room).
Error quota_recordings(uint64_t max_mb, uint64_t held_mb, int64_t asked_mb);
Error quota_profiles(std::string message);
Error rate_creates(int per_minute, int64_t retry_after_s);
// 502
Error agent_error(std::string message);
// A page the browser was sent to did not load (or not in time); the agent's reason.
Error navigation_failed(std::string message);
Error preview_unreachable(std::string message);
Error preview_bad_answer(std::string message);
// 503, 504
Error web_ui_unavailable();
// No room for another session (0: no Retry-After).
Error capacity(std::string message, int64_t retry_after_s);
// The node's memory would be overcommitted (--sessions-memory-percent).
Error capacity_memory(uint64_t limit_mb, uint64_t held_mb, uint64_t asked_mb,
                      int64_t retry_after_s);
Error draining();
Error not_ready(std::string message);
// cabin-gateway: the node that holds the session does not answer (it may come back).
Error node_unavailable(std::string node);
Error no_egress();
Error preview_timeout(std::string message);

}  // namespace errors
}  // namespace cabin::api
