#include "server/preview/preview_proxy.h"

#include <sys/socket.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <boost/container/static_vector.hpp>
#include <charconv>
#include <limits>
#include <vector>

#include "common/ascii.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/pump.h"
#include "common/spawn.h"
#include "server/api/errors.h"
#include "server/http/responses.h"
#include "server/metrics/metrics.h"
#include "server/preview/preview_request.h"
#include "server/preview/proxy_head.h"
#include "server/preview/relay.h"

namespace cabin::preview {
namespace {

using http_api::ClientStream;
using http_api::error_response;
using http_api::Response;

const auto& log() {
  static auto l = logger("preview");
  return l;
}

// Ends the wait for an app's answer, and for a request body that stopped arriving, after
// `timeout`: one timer per connection, which looks at the waits when it fires, where a timer per
// request would be armed and cancelled every time.
net::awaitable<void> watch_waits(std::shared_ptr<ConnectionFds> fds,
                                 std::shared_ptr<net::steady_timer> timer,
                                 std::chrono::steady_clock::duration timeout) {
  auto next = timeout;
  while (!fds->ended) {
    timer->expires_after(next);
    boost::system::error_code ec;
    co_await timer->async_wait(net::redirect_error(net::use_awaitable, ec));
    if (fds->ended) break;
    next = timeout;
    const auto now = std::chrono::steady_clock::now();
    if (fds->awaiting_answer) {
      auto waited = now - fds->awaiting_since;
      if (waited < timeout) {
        next = std::min(next, timeout - waited);
      } else if (fds->upstream >= 0) {
        fds->answer_timed_out = true;
        ::shutdown(fds->upstream, SHUT_RDWR);  // the pending read ends
      }
    }
    if (fds->reading_body) {
      auto idle = now - fds->body_progress;
      if (idle < timeout) {
        next = std::min(next, timeout - idle);
      } else if (fds->client >= 0) {
        ::shutdown(fds->client, SHUT_RDWR);  // the relay's read ends; the connection closes
      }
    }
  }
}

std::string cookie_header(std::string_view name, const std::string& token, const std::string& path,
                          int64_t max_age, bool secure) {
  return std::string(name) + "=" + token + "; Path=" + path +
         "; Max-Age=" + std::to_string(std::max<int64_t>(max_age, 0)) + "; HttpOnly; SameSite=Lax" +
         (secure ? "; Secure" : "");
}

}  // namespace

bool PreviewProxy::allowed_api_host(const std::string& host) const {
  if (is_ip_literal(host) || host == "localhost") return true;
  if (!config_.public_url.empty()) {
    std::string_view u = config_.public_url;
    u.remove_prefix(u.find("://") + 3);
    auto name = host_name(u.substr(0, u.find('/')));
    if (name && *name == host) return true;
  }
  return false;
}

bool PreviewProxy::claims(const http::request_header<>& h) const {
  if (!config_.preview_domain.empty()) {
    if (auto host = h.find(http::field::host); host != h.end()) {
      auto name = host_name(host->value());
      if (name && name->size() > config_.preview_domain.size() &&
          name->compare(name->size() - config_.preview_domain.size(), std::string::npos,
                        config_.preview_domain) == 0 &&
          (*name)[name->size() - config_.preview_domain.size() - 1] == '.') {
        return true;
      }
    }
  }
  return h.target().substr(0, kPathPrefix.size()) == kPathPrefix;
}

std::variant<PreviewTarget, Response> PreviewProxy::locate(const http::request_header<>& h,
                                                           bool& path_based) const {
  auto host_field = h.find(http::field::host);
  auto host = host_field == h.end() ? std::nullopt : host_name(host_field->value());
  if (!host) return error_response(api::errors::bad_host());
  PreviewTarget t;
  std::optional<Grant> grant;
  if (auto by_host = parse_preview_host(*host, config_.preview_domain)) {
    // (A path-based target is checked as its prefix is parsed.)
    if (auto r = check_target(h.target()); !r) return error_response(r.error());
    t.by_host = true;
    grant = previews_.find_port(by_host->session_id, by_host->port);
    t.upstream_target = std::string(h.target());
  } else {
    if (!allowed_api_host(*host)) {
      // A name this server is not configured for: DNS rebinding, or a misrouted request.
      return error_response(api::errors::unknown_host(host->substr(0, 64)));
    }
    path_based = true;
    auto addr = parse_preview_path(h.target());
    if (!addr) return error_response(addr.error());
    if (h.find("Service-Worker") != h.end()) {
      // A worker's scope is at most its script's directory, but on cabind's origin even one under
      // the prefix sees every request of that path, tokens included.
      return error_response(api::errors::service_worker_refused());
    }
    t.prefix = std::string(kPathPrefix) + addr->preview_id;
    if (addr->bare) {
      // "/preview/<id>?q" → "/preview/<id>/?q", so relative links resolve under the prefix.
      Response res{http::status::permanent_redirect, 11};
      std::string_view target = h.target();
      res.set(http::field::location, t.prefix + "/" + std::string(target.substr(t.prefix.size())));
      res.set(http::field::cache_control, "no-store");
      res.prepare_payload();
      return res;
    }
    grant = previews_.find(addr->preview_id);
    t.upstream_target = addr->upstream_target;
  }
  if (!grant) {
    return error_response(api::errors::preview_not_found("no live preview at this address"));
  }
  t.grant = std::move(*grant);
  return t;
}

std::optional<Response> PreviewProxy::check_origin(const http::request_header<>& h,
                                                   const PreviewTarget& t, bool tls) const {
  if (!t.by_host) return std::nullopt;
  if (!beast::websocket::is_upgrade(h) &&
      (h.method() == http::verb::get || h.method() == http::verb::head ||
       h.method() == http::verb::options)) {
    return std::nullopt;
  }
  // Sibling previews are one site, so SameSite lets their requests carry this preview's cookie:
  // only the preview's own pages (or clients that send no Origin) may change state or open a
  // WebSocket. Behind a TLS-terminating proxy the browser's origin is https.
  const bool https = tls || config_.public_url.rfind("https://", 0) == 0;
  auto origin = h.find(http::field::origin);
  if (origin != h.end() &&
      !same_origin(origin->value(), https ? "https" : "http", h[http::field::host])) {
    return error_response(api::errors::cross_origin());
  }
  return std::nullopt;
}

std::variant<Admission, Response> PreviewProxy::admit(const http::request_header<>& h,
                                                      const PreviewTarget& t,
                                                      const sessions::Session& session,
                                                      ConnectionState& state, bool tls) const {
  const Grant& grant = t.grant;
  const std::string scope = auth::preview_scope(grant.port, grant.id);
  auto check = [&](std::string_view token) -> Result<auth::TokenClaims> {
    auto claims = tokens_.verify(token, grant.session_id, scope);
    if (!claims && claims.error().code == "token_scope") {
      // A token of an earlier preview of this port, which was deleted or replaced.
      auto decoded = tokens_.decode(token);
      if (decoded && decoded->scope.rfind(auth::preview_scope(grant.port, ""), 0) == 0) {
        return auth::token_revoked("this preview was deleted or replaced: open its new URL");
      }
    }
    if (!claims) return claims.error();
    if (auto live = tokens_.check_current(*claims, session.token_generation()); !live) {
      return live.error();
    }
    return claims;
  };
  const std::string cookie_path = t.by_host ? "/" : t.prefix + "/";
  // A __Host- cookie needs Path=/, so path-based previews keep the plain name.
  const std::string_view cookie_name = t.by_host && tls ? kHostCookieName : kCookieName;

  // A token in the URL becomes a cookie, and the URL loses it.
  auto split = take_token(h.target());
  if (split.token) {
    auto claims = check(*split.token);
    if (!claims) return error_response(claims.error());
    if (h.method() != http::verb::get && h.method() != http::verb::head) {
      return error_response(api::errors::token_in_url());
    }
    Response res{http::status::found, 11};
    res.set(http::field::location, redirect_target(split.target));
    res.set(http::field::set_cookie,
            cookie_header(cookie_name, *split.token, cookie_path,
                          claims->expires_at - tokens_.clock().unix_seconds(), tls));
    res.set(http::field::cache_control, "no-store");
    res.set("Referrer-Policy", "no-referrer");
    res.prepare_payload();
    return res;
  }
  Admission out;
  std::vector<std::string> cookie_tokens;  // at most kMaxCookieTries
  for (auto it = h.find(http::field::cookie); it != h.end() && it->name() == http::field::cookie;
       ++it) {
    std::string rest = strip_cookie(it->value(), cookie_name, &cookie_tokens);
    if (!rest.empty()) out.kept_cookies.push_back(std::move(rest));
  }
  if (cookie_tokens.empty()) {
    return error_response(api::errors::unauthenticated(
        "open the preview URL with its token (cabin_token=) to get a preview cookie"));
  }
  // A sibling preview may have planted cookies of the same name beside the real one: the first
  // value that verifies counts, the one this connection verified before first of all.
  auto& known = state.verified;
  bool accepted = false;
  bool seen_before = false;
  std::optional<Error> refusal;  // the most telling one: expired or revoked over malformed
  if (!known.token.empty() && known.grant_id == grant.id &&
      known.key_epoch == tokens_.key_epoch()) {
    for (const auto& tok : cookie_tokens) {
      if (!constant_time_equal(known.token, tok)) continue;
      seen_before = true;
      auto live = tokens_.check_current(known.claims, session.token_generation());
      accepted = live.ok();
      if (!live) refusal = live.error();
      break;
    }
  }
  for (size_t i = 0; !seen_before && !accepted && i < cookie_tokens.size(); ++i) {
    if (auto claims = check(cookie_tokens[i])) {
      known = {std::move(cookie_tokens[i]), grant.id, tokens_.key_epoch(), std::move(*claims)};
      accepted = true;
    } else if (!refusal || refusal->code == "invalid_token") {
      refusal = claims.error();
    }
  }
  if (!accepted) {
    known.token.clear();
    return error_response(*refusal);
  }
  out.token_expires_at = known.claims.expires_at;
  if (auto te = h.find(http::field::transfer_encoding);
      te != h.end() &&
      (!iequals(te->value(), "chunked") || h.count(http::field::transfer_encoding) != 1)) {
    return error_response(api::errors::bad_transfer_encoding());
  }
  return out;
}

void PreviewProxy::watch_revocation(ConnectionState& state, const Grant& grant,
                                    int64_t token_expires_at) {
  if (state.fds->stale) {
    state.upstream.reset();
    state.fds->upstream = -1;
    state.fds->stale = false;
  }
  if (auto reg = state.registrations.find(grant.id);
      reg != state.registrations.end() && reg->second.active()) {
    return;
  }
  int64_t left = std::min(token_expires_at, grant.expires_at) - tokens_.clock().unix_seconds();
  state.registrations[grant.id] =
      connections_.add({grant.session_id, grant.id, std::chrono::seconds(left)}, [fds = state.fds] {
        if (fds->close_tunnel) {
          fds->close_tunnel();
        } else if (fds->busy) {
          if (fds->client >= 0) ::shutdown(fds->client, SHUT_RDWR);
          if (fds->upstream >= 0) ::shutdown(fds->upstream, SHUT_RDWR);
        } else {
          fds->stale = true;
        }
      });
}

net::awaitable<bool> PreviewProxy::connect_upstream(ConnectionState& state,
                                                    const sessions::SessionPtr& session,
                                                    const Grant& grant) {
  if (state.upstream && state.upstream_grant != grant.id) state.upstream.reset();
  if (!state.upstream) {
    auto t = co_await session->open_port(grant.port);
    if (!t) co_return false;
    state.upstream.emplace(std::move(*t));
    state.upstream_grant = grant.id;
    // Beast reads at most the buffer's free capacity: a buffer left at its first size would
    // turn a large body into thousands of small reads.
    state.upstream->buffer.reserve(kRelayChunk);
  }
  state.fds->upstream = state.upstream->stream.native_handle();
  co_return true;
}

net::awaitable<Outcome> PreviewProxy::serve(ClientStream& client, beast::flat_buffer& buffer,
                                            http::request_parser<http::empty_body>& header,
                                            ConnectionState& state) {
  boost::system::error_code ec;
  const auto& h = header.get();
  const bool has_body = header.chunked() || header.content_length().value_or(0) > 0;
  const bool client_keep = h.keep_alive();
  const unsigned client_version = h.version();
  bool path_based = false;
  auto answer = [&](Response res) -> net::awaitable<Outcome> {
    // A body the request still carries is never read here: the connection closes after.
    bool keep = client_keep && !has_body;
    res.keep_alive(keep);
    if (path_based) res.insert("Content-Security-Policy", kPathPreviewCsp);
    co_await http::async_write(client, res, net::redirect_error(net::use_awaitable, ec));
    co_return ec || !keep ? Outcome::kClose : Outcome::kKeepAlive;
  };

  // 1. Which preview, on which host; 2. from which origin; 3. let in by what.
  auto located = locate(h, path_based);
  if (auto* res = std::get_if<Response>(&located)) co_return co_await answer(std::move(*res));
  const PreviewTarget& target = std::get<PreviewTarget>(located);
  const Grant& grant = target.grant;
  auto session = sessions_.find(grant.session_id);
  if (!session) {
    co_return co_await answer(
        error_response(api::errors::preview_not_found("no live preview at this address")));
  }
  if (session->paused()) co_return co_await answer(error_response(api::errors::session_paused()));
  // A request to the app, or its WebSocket while it is open, is someone using the session.
  const sessions::Session::Presence present(session);
  const metrics::GaugeHold open("cabin_connections", {"preview"});
  if (auto refusal = check_origin(h, target, client.is_tls())) {
    co_return co_await answer(std::move(*refusal));
  }
  auto admitted = admit(h, target, *session, state, client.is_tls());
  if (auto* res = std::get_if<Response>(&admitted)) co_return co_await answer(std::move(*res));
  const Admission& admission = std::get<Admission>(admitted);

  // 4. Connections that a token let in close on revocation, deletion and expiry.
  state.fds->client = client.socket().native_handle();
  watch_revocation(state, grant, admission.token_expires_at);

  // 5. The request as the app gets it.
  const bool websocket = beast::websocket::is_upgrade(h);
  const bool expect_continue =
      h.count(http::field::expect) && iequals(h[http::field::expect], "100-continue");
  const bool head = h.method() == http::verb::head;
  const std::string original_host(h[http::field::host]);
  http::request_parser<http::buffer_body> req{std::move(header)};
  req.body_limit((std::numeric_limits<std::uint64_t>::max)());
  if (state.client_ip.empty()) {
    state.client_ip = client.socket().remote_endpoint(ec).address().to_string();
  }
  UpstreamRequest upstream_req{
      .target = target.upstream_target,
      .port = grant.port,
      .client_ip = state.client_ip,
      .original_host = original_host,
      .tls = client.is_tls(),
      .prefix = target.prefix,
      .cookies = &admission.kept_cookies,
      .framing = req.chunked()          ? Framing::kChunked
                 : req.content_length() ? Framing::kLength
                                        : Framing::kNone,
      .length = req.content_length().value_or(0),
      .websocket = websocket,
  };
  state.head.clear();
  write_request_head(state.head, req.get(), upstream_req);
  const Framing request_framing = upstream_req.framing;

  // 6. The upstream connection: kept from the last request to the same grant, else a new one.
  if (!co_await connect_upstream(state, session, grant)) {
    co_return co_await answer(error_response(api::errors::preview_unreachable(
        "nothing answers on port " + std::to_string(grant.port) + " in the sandbox")));
  }
  session.reset();  // a proxied connection must not keep an ended session alive
  state.fds->busy = true;
  auto& up = *state.upstream;
  if (expect_continue) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    co_await net::async_write(client, net::buffer(kContinue.data(), kContinue.size()),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return Outcome::kClose;
  }
  if (!state.relay_buffer) {
    state.relay_buffer.reset(new char[kRelayChunk]);
    buffer.reserve(kRelayChunk);  // the client side too, for uploads
  }
  if (!state.answer_watch) {
    state.answer_watch = std::make_shared<net::steady_timer>(client.get_executor());
    cabin::spawn(client.get_executor(),
                 watch_waits(state.fds, state.answer_watch,
                             std::chrono::seconds(config_.preview_answer_timeout_s)),
                 "preview " + grant.id + ": wait watch");
  }

  // 7. The request's body, as it comes.
  state.fds->body_progress = std::chrono::steady_clock::now();
  state.fds->reading_body = true;
  const RelayCounts counts = metrics::relay_counts(metrics::Relay::kPreview);
  ec = co_await relay(client, buffer, req, up.stream, state.head, request_framing,
                      state.relay_buffer.get(), &state.fds->body_progress, counts.up);
  state.fds->reading_body = false;
  if (ec) {
    log()->debug("preview {}: request relay ended: {}", grant.id, ec.message());
    state.upstream.reset();
    state.fds->upstream = -1;
    if (ec == net::error::eof || ec == http::error::partial_message) co_return Outcome::kClose;
    // Nothing of an answer has been sent yet.
    co_return co_await answer(error_response(
        api::errors::preview_unreachable("the app closed the connection: " + ec.message())));
  }

  // 8. The answer's head.
  state.fds->awaiting_since = std::chrono::steady_clock::now();
  state.fds->awaiting_answer = true;
  std::optional<http::response_parser<http::buffer_body>> parsed;
  ec = co_await read_answer_head(up.stream, up.buffer, parsed, head);
  state.fds->awaiting_answer = false;
  auto& res = *parsed;
  if (ec) {
    state.upstream.reset();
    state.fds->upstream = -1;
    if (std::exchange(state.fds->answer_timed_out, false)) {
      co_return co_await answer(error_response(
          api::errors::preview_timeout("the app did not answer within " +
                                       std::to_string(config_.preview_answer_timeout_s) + " s")));
    }
    co_return co_await answer(error_response(
        api::errors::preview_bad_answer("the app's answer is not HTTP/1.1: " + ec.message())));
  }
  const auto& rh = res.get();
  ClientAnswer answer_head{.prefix = target.prefix, .port = grant.port};
  state.head.clear();

  // 9. A WebSocket takes the connection over.
  if (websocket && rh.result() == http::status::switching_protocols) {
    answer_head.websocket = true;
    write_response_head(state.head, rh, answer_head);
    co_await take_over(client, buffer, state, grant.id, ec);
    co_return ec ? Outcome::kClose : Outcome::kTaken;
  }

  // 10. Else the answer's body, as it comes.
  const bool up_keep = res.keep_alive() && !res.need_eof();
  const bool eof_body = res.need_eof() && !head;
  const bool keep = client_keep && !(eof_body && client_version < 11) && !websocket;
  answer_head.keep_alive = keep;
  if (!head && !res.is_done() && (res.chunked() || (eof_body && keep))) {
    // An answer that ends at EOF upstream is chunked towards the client, which keeps its
    // connection.
    answer_head.framing = Framing::kChunked;
  } else if (auto length = res.content_length()) {
    answer_head.framing = Framing::kLength;
    answer_head.length = *length;
  }
  // Cabin speaks HTTP/1.1 to the client whatever the app speaks.
  write_response_head(state.head, rh, answer_head);
  // An answer's body may idle as long as the app likes (event streams).
  ec = co_await relay(up.stream, up.buffer, res, client, state.head, answer_head.framing,
                      state.relay_buffer.get(), nullptr, counts.down);
  if (ec || !up_keep) {
    state.upstream.reset();
    state.fds->upstream = -1;
  }
  if (ec) {
    log()->debug("preview {}: answer relay ended: {}", grant.id, ec.message());
    co_return Outcome::kClose;
  }
  state.fds->busy = false;
  co_return keep ? Outcome::kKeepAlive : Outcome::kClose;
}

net::awaitable<void> PreviewProxy::take_over(ClientStream& client, beast::flat_buffer& buffer,
                                             ConnectionState& state, const std::string& grant_id,
                                             boost::system::error_code& ec) {
  auto& up = *state.upstream;
  const RelayCounts counts = metrics::relay_counts(metrics::Relay::kPreview);
  count_bytes(counts.down, co_await net::async_write(client, net::buffer(state.head),
                                                     net::redirect_error(net::use_awaitable, ec)));
  if (ec) co_return;
  // Bytes either side sent early.
  if (buffer.size() > 0) {
    count_bytes(counts.up, co_await net::async_write(up.stream, buffer.data(),
                                                     net::redirect_error(net::use_awaitable, ec)));
  }
  if (ec) co_return;
  if (state.before_take) state.before_take();
  log()->debug("preview {}: WebSocket open", grant_id);
  // Ending the client's side ends the pump, which closes the app's side too.
  state.fds->close_tunnel = client.closer();
  state.fds->client = state.fds->upstream = -1;
  // The app's first frames, read with its answer, go down through the pump's frame tracking.
  auto bridge = [counts, first = beast::buffers_to_string(up.buffer.data())](
                    ClientStream c, drivers::AgentStream u) mutable {
    return pump_websocket(std::move(c), std::move(u), counts, std::move(first));
  };
  co_await http_api::run_pump(pumps_, std::move(client), std::move(up.stream), bridge);
  state.upstream.reset();
}

}  // namespace cabin::preview
