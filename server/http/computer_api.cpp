// The computer-use endpoints of Api: screenshots, frame streams and action batches, relayed to
// cabin-agent.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <cctype>

#include "common/computer_actions.h"
#include "server/api/computer_wire.h"
#include "server/api/errors.h"
#include "server/http/api.h"

namespace cabin::http_api {
namespace {

computer::ScreenSize screen_of(const sessions::Session& s) {
  return {s.record().width, s.record().height};
}

}  // namespace

net::awaitable<Response> Api::computer(const api::Route& route, const Request& req) {
  auto s = sessions_.find(route.session_id);
  if (!s) co_return error_response(api::errors::session_not_found());
  const auto screen = screen_of(*s);
  std::optional<computer::Size> model;
  if (const auto& d = s->spec().display) model = computer::Size{d->width, d->height};
  auto batch = computer::parse_request(req.body(), computer::Limits{}, screen, model);
  if (!batch) co_return error_response(batch.error());
  auto res = co_await s->agent().request(
      http::verb::post, "/agent/v1/computer", computer::to_json(*batch).dump(),
      std::chrono::milliseconds(api::computer_budget_ms(*batch)),
      api::computer_answer_limit(*batch, screen));
  if (!res) co_return error_response(res.error());
  auto status = res->result();
  if (status != http::status::ok && status != http::status::unprocessable_entity) {
    co_return error_response(
        api::errors::agent_error("agent answered " + std::to_string(res->result_int())));
  }
  auto body =
      api::check_computer_answer(res->body(), batch->actions.size(), screen, batch->model_size);
  if (!body) co_return error_response(body.error());
  co_return json_response(status, *body);
}

net::awaitable<Response> Api::screenshot(const api::Route& route) {
  auto s = sessions_.find(route.session_id);
  if (!s) co_return error_response(api::errors::session_not_found());
  auto shot = api::screenshot_query(route.query, screen_of(*s));
  if (!shot) co_return error_response(shot.error());
  auto res = co_await s->agent().request(http::verb::get, "/agent/v1/screenshot?" + shot->query,
                                         "", std::chrono::seconds(30),
                                         api::image_bytes_limit(shot->width, shot->height));
  if (!res) co_return error_response(res.error());
  auto type = res->find(http::field::content_type);
  bool image =
      type != res->end() && (type->value() == "image/png" || type->value() == "image/jpeg");
  if (res->result() != http::status::ok || !image) {
    co_return error_response(api::errors::agent_error(
        "agent answered " + std::to_string(res->result_int()) + " without an image"));
  }
  Response out{http::status::ok, 11};
  out.set(http::field::content_type, type->value());
  out.set(http::field::cache_control, "no-store");
  // The agent's grab and encode times, passed on when they look like what it sends.
  if (auto t = res->find("Server-Timing");
      t != res->end() && t->value().size() <= 128 &&
      std::all_of(t->value().begin(), t->value().end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == ';' || c == '=' || c == '.' ||
               c == ',' || c == ' ';
      })) {
    out.set("Server-Timing", t->value());
  }
  out.body() = std::move(res->body());
  out.prepare_payload();
  co_return out;
}

net::awaitable<void> Api::frames(const api::Route& route, const Authn& authn, Request req,
                                 ClientStream socket) {
  const bool mjpeg = route.id == api::RouteId::kFramesMjpeg;
  if (!mjpeg && !beast::websocket::is_upgrade(req)) {
    co_await refuse_connection(
        socket, error_response(api::errors::websocket_required(
                    "this endpoint takes a WebSocket upgrade; frames.mjpeg does not")));
    co_return;
  }
  auto s = sessions_.find(route.session_id);
  if (!s || s->record().status != store::SessionStatus::kRunning) {
    co_await refuse_connection(socket, error_response(api::errors::session_not_found()));
    co_return;
  }
  auto q = api::frames_agent_query(route.query, screen_of(*s), mjpeg);
  if (!q) {
    co_await refuse_connection(socket, error_response(q.error()));
    co_return;
  }
  // A viewer let in by a token goes when the session's tokens are revoked: shutdown() ends its
  // reads and writes, and the viewer's coroutines then finish on their own.
  auth::TokenConnections::Registration reg;
  if (authn.by_token) {
    reg = connections_.add({s->id(), "", token_time_left(authn)},
                           [fd = socket.socket().native_handle()] { ::shutdown(fd, SHUT_RDWR); });
  }
  if (mjpeg) {
    co_await frame_hub_.serve_mjpeg(std::move(s), std::move(q->agent_query), std::move(socket));
  } else {
    co_await frame_hub_.serve_websocket(std::move(s), std::move(q->agent_query),
                                        std::move(q->format), q->fps, std::move(req),
                                        std::move(socket));
  }
}

}  // namespace cabin::http_api
