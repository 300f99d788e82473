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
#include "server/handlers/api.h"

namespace cabin::http_api {

net::awaitable<Response> Api::computer(const api::Route& route, const Request& req) {
  auto s = sessions_.find(route.session_id);
  if (!s) co_return error_response(api::errors::session_not_found());
  auto batch =
      computer::parse_request(req.body(), computer::Limits{}, s->screen(), s->model_size());
  if (!batch) co_return error_response(batch.error());
  if (auto r = input_allowed(*s, *batch); !r) co_return error_response(r.error());
  auto answer = co_await s->computer(*batch);
  if (!answer) co_return error_response(answer.error());
  co_return json_response(answer->status, answer->body);
}

net::awaitable<Response> Api::screenshot(const api::Route& route) {
  auto s = sessions_.find(route.session_id);
  if (!s) co_return error_response(api::errors::session_not_found());
  auto shot = api::screenshot_query(route.query, s->screen());
  if (!shot) co_return error_response(shot.error());
  auto image = co_await s->screenshot(*shot);
  if (!image) co_return error_response(image.error());
  Response out{http::status::ok, 11};
  out.set(http::field::content_type, image->content_type);
  out.set(http::field::cache_control, "no-store");
  if (!image->server_timing.empty()) out.set("Server-Timing", image->server_timing);
  out.body() = std::move(image->bytes);
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
  if (!s || !s->running()) {
    co_await refuse_connection(socket, error_response(api::errors::session_not_found()));
    co_return;
  }
  auto q = api::frames_agent_query(route.query, s->screen(), mjpeg);
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
