// Api: the endpoints. A routed, authenticated request is parsed once into a typed request, handed
// to a Session verb or the SessionManager, and answered. One file per area: api.cpp
// (authentication, tokens in URLs, dispatch), sessions_api.cpp, cdp_api.cpp, computer_api.cpp
// (with frame_hub.cpp), live_api.cpp, tokens_api.cpp, preview_api.cpp.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "common/agent_protocol.h"
#include "common/log.h"
#include "server/api/router.h"
#include "server/audit/audit_log.h"
#include "server/auth/token_connections.h"
#include "server/auth/tokens.h"
#include "server/config.h"
#include "server/handlers/frame_hub.h"
#include "server/http/client_stream.h"
#include "server/http/io_pool.h"
#include "server/http/responses.h"
#include "server/http/static_files.h"
#include "server/preview/previews.h"
#include "server/sessions/session_manager.h"
#include "server/store/key_store.h"
#include "vnc/rfb_filter.h"

namespace cabin::http_api {

namespace net = boost::asio;
namespace beast = boost::beast;
using Request = http::request<http::string_body>;

// Who a request was let in by.
struct Authn {
  bool by_token = false;     // a capability token (else an API key, or nothing for kNone)
  auth::TokenClaims claims;  // when by_token
  std::optional<store::ApiKeyRecord> key;  // a tenant's API key (else the admin key)
  // Whose request it is, for owners, Idempotency-Keys and the audit log: "admin", the tenant
  // key's id, or "token".
  std::string who() const { return by_token ? "token" : key ? key->id : "admin"; }
};

// The tenant a request acts for, with its key's quotas (none for the admin key).
sessions::Tenant tenant_of(const Authn& authn);

// The endpoints' logger ("api").
spdlog::logger& api_log();

// Answers 200 with `content_type`, the file's length and `more_fields` (whole header lines),
// then streams the file's bytes from the agent (files_api.cpp), each piece given a minute.
net::awaitable<Result<void>> send_agent_file(ClientStream& socket, sessions::Tunnel& file,
                                             std::string_view content_type,
                                             std::string_view more_fields = {});

// One read or write of a file's bytes between cabind and the agent (or a client) may take this
// long before the transfer is given up.
inline constexpr std::chrono::seconds kFileTransferStall{60};

// GET /files?dir='s answer: {"dir", "entries": [{name, path, type, size, modified_at}]}.
nlohmann::json file_listing(const std::string& dir,
                            const std::vector<agent_protocol::FileEntry>& entries);

// 404 session_ended, with the session's end reason (or its status).
Error session_ended_error(const store::SessionRecord& r);

class Api {
 public:
  Api(const ServerConfig& config, sessions::SessionManager& sessions,
      const auth::TokenService& tokens, auth::TokenConnections& connections,
      preview::Previews& previews, std::string api_key, const StaticFiles& ui)
      : config_(config),
        sessions_(sessions),
        tokens_(tokens),
        connections_(connections),
        previews_(previews),
        api_key_(std::move(api_key)),
        ui_(ui) {}

  // Authenticates the routed request. kNone routes always pass.
  Result<Authn> authenticate(const api::Route& route, const Request& req) const;
  // GET /readyz: 200 while creates are taken (a driver can start sandboxes, not draining).
  Response readyz() const;
  // Checks a token for a live session: signature, expiry, session, one of `scopes`, and the
  // session's current generation (revocation).
  Result<auth::TokenClaims> check_token(std::string_view token, const std::string& session_id,
                                        const std::vector<std::string_view>& scopes) const;

  // Byte pumps over plain TCP run on `pool` from now on (null: on the caller's executor).
  void use_pumps(IoPool* pool) { pumps_ = pool; }
  // What requests do to sessions is recorded there from now on (null: nowhere).
  void use_audit(audit::AuditLog* log) { audit_ = log; }
  // Tenant API keys are minted into and checked against `keys` from now on (null: only the
  // admin key is taken).
  void use_keys(store::KeyStore* keys);

  // Handles every non-upgrade route. `cancel` fires when the client has left (watched only for
  // creates, which may wait long for room).
  net::awaitable<Response> handle(const api::Route& route, const Authn& authn, const Request& req,
                                  Cancellation* cancel = nullptr);

  // Handles a WebSocket upgrade route; takes the connection. Answers errors itself.
  net::awaitable<void> handle_upgrade(const api::Route& route, const Authn& authn, Request req,
                                      ClientStream stream, beast::flat_buffer buffer);

 private:
  nlohmann::json session_json(const store::SessionRecord& r, const Request& req) const;
  std::string why_not_a_key(std::string_view authorization) const;
  Result<Authn> authenticate_once(const api::Route& route, const Request& req) const;
  // What a tenant key may not reach: the admin's routes (403 admin_only) and other tenants'
  // sessions (404, as if there were none).
  Result<void> tenant_may(const api::Route& route, const store::ApiKeyRecord& key) const;
  net::awaitable<Response> dispatch(const api::Route& route, const Authn& authn,
                                    const Request& req, Cancellation* cancel);
  // The audit log's entry for a request and its answer; nullopt for what it does not record.
  std::optional<nlohmann::json> audit_entry(const api::Route& route, const Authn& authn,
                                            const Request& req, const Response& res) const;
  std::string base_url(const Request& req, bool websocket) const;
  std::string cdp_token(const sessions::Session& s) const;
  // A capability token for `scope`, valid for --cdp-token-ttl-s and never past the session's end.
  std::string scoped_token(const sessions::Session& s, const std::string& scope) const;
  // Now plus `ttl_s`, never past the session's end: a token must not outlive what it opens.
  int64_t expiry_within(const sessions::Session& s, int64_t ttl_s) const;
  // The optional "ttl_s" of a token or preview request: 1..--max-token-ttl-s, default an hour
  // (or the maximum, when that is less).
  Result<int64_t> requested_ttl(const nlohmann::json& body) const;
  // GET /v1/sessions/{id}/vnc: the RFB WebSocket, filtered by the caller's access.
  net::awaitable<void> vnc(const api::Route& route, const Authn& authn, Request req,
                           ClientStream socket);

  // sessions_api.cpp
  net::awaitable<Response> create(const Authn& authn, const Request& req, Cancellation* cancel);
  Response list_sessions(const api::Route& route, const Authn& authn, const Request& req) const;
  Response get_session(const api::Route& route, const Request& req) const;
  net::awaitable<Response> delete_session(const api::Route& route, const Request& req);
  // PATCH {timeout_s, idle_timeout_s}: the session's timers, within the server's bounds.
  Response patch_session(const api::Route& route, const Request& req);
  // POST /keepalive: the idle time starts again.
  // POST /fork: children of a session's browser (SessionManager::fork).
  net::awaitable<Response> fork(const Authn& authn, const api::Route& route, const Request& req);
  Response keepalive(const api::Route& route, const Request& req);
  // POST /pause and /resume.
  net::awaitable<Response> pause_or_resume(const api::Route& route, const Request& req);
  // session_paused for a route that needs the sandbox to run while the session is paused.
  Result<void> not_paused(const api::Route& route) const;
  // Held for a request or a stream of the route's live session; empty for none.
  sessions::Session::Presence presence(const api::Route& route) const;
  Response logs(const api::Route& route) const;
  Response get_network(const api::Route& route) const;
  Response put_network(const api::Route& route, const Request& req);
  Response network_log(const api::Route& route) const;
  net::awaitable<Response> exec(const api::Route& route, const Request& req);
  net::awaitable<Response> computer(const api::Route& route, const Request& req);
  net::awaitable<Response> screenshot(const api::Route& route);
  // GET /frames (WebSocket) and /frames.mjpeg; takes the connection.
  net::awaitable<void> frames(const api::Route& route, const Authn& authn, Request req,
                              ClientStream socket);
  // cdp_api.cpp: the CDP WebSocket to the browser or a page; takes the connection.
  net::awaitable<void> cdp(const api::Route& route, const Authn& authn, Request req,
                           ClientStream socket, beast::flat_buffer buffer);
  // Discovery's URLs carry the caller's own token, or a fresh one for the API key: a token never
  // buys itself more time.
  net::awaitable<Response> discovery(const api::Route& route, const Authn& authn,
                                     const Request& req);
  // A token-authenticated connection may join its session's only while they are fewer than
  // --max-token-connections-per-session; else 429 too_many_connections.
  Result<void> token_connection_room(const Authn& authn, const std::string& session_id) const;
  // How long a token-authenticated connection may stay open: the token's time left.
  std::optional<std::chrono::steady_clock::duration> token_time_left(const Authn& authn) const;
  Response info(const Authn& authn) const;
  // control_api.cpp: POST /control, the clipboard, GET /events (takes the connection).
  Response control(const api::Route& route, const Authn& authn, const Request& req);
  nlohmann::json control_status(const sessions::Session& s) const;
  // human_in_control when someone holds the session's input lock and the batch has input in it.
  Result<void> input_allowed(const sessions::Session& s, const computer::Batch& batch) const;
  net::awaitable<Response> clipboard(const api::Route& route, const Request& req);
  // files_api.cpp: a file's bytes or a directory's listing, an upload streamed from the
  // client's body into the sandbox, a removal, the browser's downloads.
  net::awaitable<void> get_files(const api::Route& route, ClientStream socket);
  net::awaitable<void> put_file(const api::Route& route, const Authn& authn, Request req,
                                ClientStream socket, beast::flat_buffer buffer);
  net::awaitable<Response> delete_file(const api::Route& route);
  Response list_downloads(const api::Route& route) const;
  // recordings_api.cpp: start, list, stop, delete; the video, streamed.
  net::awaitable<Response> recordings(const api::Route& route, const Authn& authn,
                                      const Request& req);
  net::awaitable<void> recording_video(const api::Route& route, ClientStream socket);
  net::awaitable<void> events(const api::Route& route, const Authn& authn, Request req,
                              ClientStream socket);
  // mcp_api.cpp: POST /mcp, one JSON-RPC message; tools act through handle() as the caller.
  net::awaitable<Response> mcp(const Authn& authn, const Request& req);
  net::awaitable<nlohmann::json> mcp_tool(const Authn& authn, const Request& outer,
                                          const std::string& name, const nlohmann::json& args);
  // file_read, file_write and file_list: the files endpoint each stands for, with the bytes in
  // the message.
  net::awaitable<nlohmann::json> mcp_file_tool(const Authn& authn, const std::string& name,
                                               const std::string& base, const nlohmann::json& args);
  net::awaitable<Response> file_tool_answer(const api::Route& route, const std::string& name,
                                            const nlohmann::json& args);
  // One request made on the caller's behalf, routed, checked and answered as if it had come in.
  net::awaitable<Response> on_behalf(const Authn& authn, const Request& outer, http::verb verb,
                                     const std::string& target, std::string body);
  // keys_api.cpp: tenant keys, for the admin key only.
  nlohmann::json key_json(const store::ApiKeyRecord& k) const;
  Response create_key(const Request& req);
  Response list_keys() const;
  Response delete_key(const api::Route& route);
  // profiles_api.cpp: saved browser profiles, each tenant's own.
  Response create_profile(const Authn& authn, const Request& req);
  Response list_profiles(const Authn& authn) const;
  Response get_profile(const Authn& authn, const api::Route& route) const;
  Response delete_profile(const Authn& authn, const api::Route& route);
  Response ui_file(std::string_view name, const Request& req, PageCache cache) const;
  Response live_status(const api::Route& route, const Request& req) const;
  Response mint_token(const api::Route& route, const Request& req);
  Response revoke_tokens(const api::Route& route);
  // preview_api.cpp
  // The preview's URLs with `token` in them: path_url, host_url (with a preview domain), url.
  nlohmann::json preview_urls(const preview::Grant& g, const std::string& token,
                              const Request& req) const;
  nlohmann::json preview_json(const preview::Grant& g, const sessions::Session& s,
                              const Request& req) const;
  Response create_preview(const api::Route& route, const Request& req);
  Response list_previews(const api::Route& route, const Request& req);
  Response delete_preview(const api::Route& route);

  const ServerConfig& config_;
  sessions::SessionManager& sessions_;
  const auth::TokenService& tokens_;
  auth::TokenConnections& connections_;
  preview::Previews& previews_;
  std::string api_key_;
  const StaticFiles& ui_;
  FrameHub frame_hub_;
  IoPool* pumps_ = nullptr;
  audit::AuditLog* audit_ = nullptr;
  store::KeyStore* keys_ = nullptr;
};

}  // namespace cabin::http_api
