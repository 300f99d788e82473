// Around the browser: the input lock a person takes from the live view, the sandbox's clipboard,
// and the session's event stream (a WebSocket, or Server-Sent Events for plain HTTP clients).
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <sys/socket.h>

#include <array>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include "common/agent_protocol.h"
#include "common/clock.h"
#include "common/json_fields.h"
#include "common/spawn.h"
#include "server/api/errors.h"
#include "server/handlers/api.h"
#include "server/http/websocket.h"
#include "server/http/write_watch.h"

namespace cabin::http_api {
using nlohmann::json;

namespace {

constexpr int64_t kDefaultControlTtlS = 300;
constexpr int64_t kMaxControlTtlS = 3600;
// A stream quiet this long gets a comment (SSE), so proxies and clients see it is alive.
constexpr std::chrono::seconds kEventsKeepalive{15};
// One event's write may take this long; a client that reads nothing is cut off then.
constexpr std::chrono::seconds kEventsWriteTimeout{10};
// What the kernel may hold for one events client: events are small, and a client that stops
// reading should not pin megabytes of socket buffer.
constexpr int kEventsSendBuffer = 16 * 1024;

json control_json(const sessions::Session& s) {
  const auto& c = s.control();
  if (!c) return {{"held", false}, {"holder", nullptr}, {"since", nullptr}, {"expires_at", nullptr}};
  return {{"held", true},
          {"holder", c->holder},
          {"since", format_rfc3339(c->since)},
          {"expires_at", format_rfc3339(c->expires_at)}};
}

bool is_input(const computer::Action& a) {
  return !std::holds_alternative<computer::Wait>(a) &&
         !std::holds_alternative<computer::Screenshot>(a) &&
         !std::holds_alternative<computer::CursorPosition>(a);
}

// "since" in the query, or the Last-Event-ID an EventSource sends when it reconnects; nullopt
// for neither: from now on.
Result<std::optional<uint64_t>> events_since(const api::Route& route, const Request& req) {
  std::string v;
  if (auto it = route.query.find("since"); it != route.query.end()) {
    v = it->second;
  } else if (auto h = req.find("Last-Event-ID"); h != req.end()) {
    v = std::string(h->value());
  } else {
    return std::optional<uint64_t>{};
  }
  if (v.empty() || v.size() > 15 || v.find_first_not_of("0123456789") != std::string::npos) {
    return invalid_field("since", "must be an event's seq");
  }
  return std::optional<uint64_t>(std::stoull(v));
}

// Sends every event after `since` with `send` (a callable taking (seq or 0, json) and returning
// an awaitable bool: false when the write failed), waiting for more, until the client is gone,
// the write fails or the session has ended and its last event is sent. `quiet` is called when
// nothing happened for kEventsKeepalive.
template <typename Send, typename Quiet>
net::awaitable<void> pump_events(sessions::EventLog& log, uint64_t since, const bool& gone,
                                 Send send, Quiet quiet) {
  uint64_t cursor = since;
  while (!gone) {
    auto slice = log.after(cursor);
    if (slice.gap) {
      const uint64_t next = slice.events.empty() ? log.last_seq() + 1 : slice.events.front().seq;
      // No seq: a reader that reconnects with ?since= must not skip past what it has.
      const json lost = {{"type", "events_lost"}, {"after", cursor}, {"next", next}};
      if (!co_await send(0, lost.dump())) co_return;
    }
    for (const auto& e : slice.events) {
      if (gone || !co_await send(e.seq, *e.json)) co_return;
      cursor = e.seq;
    }
    if (!slice.events.empty()) continue;
    if (log.closed()) co_return;
    if (!co_await log.changed().wait_until(Notifier::Clock::now() + kEventsKeepalive)) {
      if (!co_await quiet()) co_return;
    }
  }
}

}  // namespace

Response Api::control(const api::Route& route, const Authn& authn, const Request& req) {
  auto s = sessions_.find(route.session_id);
  if (!s) return error_response(api::errors::session_not_found());
  auto body = parse_object(req.body());
  if (!body) return error_response(body.error());
  if (auto u = reject_unknown(*body, {"action", "ttl_s"}); !u) return error_response(u.error());
  auto action_field = body->find("action");
  if (action_field == body->end()) return error_response(invalid_field("action", "is required"));
  auto action = read_string(*action_field, "action", 16);
  if (!action) return error_response(action.error());
  int64_t ttl = kDefaultControlTtlS;
  if (auto it = body->find("ttl_s"); it != body->end()) {
    auto t = read_int(*it, "ttl_s", 1, kMaxControlTtlS);
    if (!t) return error_response(t.error());
    ttl = *t;
  }
  if (*action == "take") {
    // A live view's token speaks for the person looking at it, and no longer than it lives; the
    // API key for its caller.
    if (auto left = token_time_left(authn)) {
      ttl = std::min<int64_t>(ttl, std::chrono::duration_cast<std::chrono::seconds>(*left).count());
    }
    s->take_control(authn.by_token ? "live_view" : authn.who(), authn.by_token, ttl);
  } else if (*action == "release") {
    // An operator's lock is the operator's to let go.
    if (authn.by_token && s->control() && !s->control()->viewer) {
      return error_response(api::errors::control_not_yours(s->control()->holder));
    }
    s->release_control("released");
  } else {
    return error_response(invalid_field("action", "must be take or release"));
  }
  return json_response(http::status::ok, control_json(*s));
}

nlohmann::json Api::control_status(const sessions::Session& s) const { return control_json(s); }

Result<void> Api::input_allowed(const sessions::Session& s, const computer::Batch& batch) const {
  const auto& c = s.control();
  if (!c) return {};
  for (const auto& a : batch.actions) {
    if (is_input(a)) return api::errors::human_in_control(c->holder);
  }
  return {};
}

net::awaitable<Response> Api::clipboard(const api::Route& route, const Request& req) {
  auto s = sessions_.find(route.session_id);
  if (!s) co_return error_response(api::errors::session_not_found());
  if (route.id == api::RouteId::kGetClipboard) {
    auto text = co_await s->clipboard();
    if (!text) co_return error_response(text.error());
    co_return json_response(http::status::ok, {{"text", std::move(*text)}});
  }
  auto text = agent_protocol::parse_clipboard(req.body());
  if (!text) co_return error_response(text.error());
  if (auto r = co_await s->set_clipboard(*text); !r) co_return error_response(r.error());
  co_return json_response(http::status::ok, {{"text", std::move(*text)}});
}

net::awaitable<void> Api::events(const api::Route& route, const Authn& authn, Request req,
                                 ClientStream socket) {
  auto s = sessions_.find(route.session_id);
  if (!s) {
    co_await refuse_connection(socket, error_response(api::errors::session_not_found()));
    co_return;
  }
  auto since = events_since(route, req);
  if (!since) {
    co_await refuse_connection(socket, error_response(since.error()));
    co_return;
  }
  auto log = s->events();
  const uint64_t from = since->value_or(log->last_seq());
  const std::string id = s->id();
  auth::TokenConnections::Registration reg;
  if (authn.by_token) reg = connections_.add({id, "", token_time_left(authn)}, socket.closer());
  s.reset();  // a reader must not keep an ended session alive
  {
    const int sndbuf = kEventsSendBuffer;
    ::setsockopt(socket.socket().native_handle(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  }

  auto ex = co_await net::this_coro::executor;
  auto watch = std::make_shared<WriteWatch>(ex);
  auto gone = std::make_shared<bool>(false);
  auto reader_done = std::make_shared<bool>(false);
  boost::system::error_code ec;

  if (beast::websocket::is_upgrade(req)) {
    WebSocket ws(std::move(socket));
    ws.set_option(websocket::stream_base::decorator([](websocket::response_type& res) {
      res.set(http::field::server, "cabind");
    }));
    ws.read_message_max(4096);
    co_await ws.async_accept(req, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    ws.text(true);
    // The client sends nothing we use; reading answers pings and the close handshake and tells
    // when it leaves.
    cabin::spawn(
        ex,
        [](WebSocket& ws, std::shared_ptr<bool> gone, std::shared_ptr<bool> done,
           sessions::EventLogPtr log) -> net::awaitable<void> {
          beast::flat_buffer in;
          boost::system::error_code ec;
          while (!ec) {
            in.clear();
            co_await ws.async_read(in, net::redirect_error(net::use_awaitable, ec));
          }
          *gone = true;
          *done = true;
          log->changed().notify_all();
        }(ws, gone, reader_done, log),
        "events reader");
    cabin::spawn(ex,
                 watch_writes(watch, ws.next_layer(), kEventsWriteTimeout, "an events client"),
                 "events write watch");
    co_await pump_events(
        *log, from, *gone,
        [&](uint64_t, const std::string& e) -> net::awaitable<bool> {
          watch->begin();
          co_await ws.async_write(net::buffer(e), net::redirect_error(net::use_awaitable, ec));
          watch->done();
          co_return !ec;
        },
        []() -> net::awaitable<bool> { co_return true; });
    watch->end();
    if (!ec && !*gone) {
      co_await ws.async_close(websocket::close_reason(websocket::close_code::normal, "session ended"),
                              net::redirect_error(net::use_awaitable, ec));
    }
    ws.next_layer().shutdown(net::socket_base::shutdown_both, ec);
    while (!*reader_done) co_await log->changed().wait_until(Notifier::Clock::time_point::max());
    co_return;
  }

  // Server-Sent Events: any HTTP client can read them, and EventSource reconnects by itself
  // with Last-Event-ID.
  static constexpr std::string_view kHead =
      "HTTP/1.1 200 OK\r\nServer: cabind\r\nContent-Type: text/event-stream\r\n"
      "Cache-Control: no-store\r\nX-Accel-Buffering: no\r\nConnection: close\r\n\r\n";
  co_await net::async_write(socket, net::buffer(kHead), net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;
  cabin::spawn(
      ex,
      [](ClientStream& socket, std::shared_ptr<bool> gone, std::shared_ptr<bool> done,
         sessions::EventLogPtr log) -> net::awaitable<void> {
        std::array<char, 512> buf;
        boost::system::error_code ec;
        while (!ec) {
          co_await socket.async_read_some(net::buffer(buf),
                                          net::redirect_error(net::use_awaitable, ec));
        }
        *gone = true;
        *done = true;
        log->changed().notify_all();
      }(socket, gone, reader_done, log),
      "events reader");
  cabin::spawn(ex, watch_writes(watch, socket, kEventsWriteTimeout, "an events client"),
               "events write watch");
  std::string chunk;
  auto write = [&](std::string_view bytes) -> net::awaitable<bool> {
    watch->begin();
    co_await net::async_write(socket, net::buffer(bytes),
                              net::redirect_error(net::use_awaitable, ec));
    watch->done();
    co_return !ec;
  };
  co_await pump_events(
      *log, from, *gone,
      [&](uint64_t seq, const std::string& e) -> net::awaitable<bool> {
        chunk.clear();
        if (seq != 0) chunk += "id: " + std::to_string(seq) + "\n";
        chunk += "data: " + e + "\n\n";
        co_return co_await write(chunk);
      },
      [&]() -> net::awaitable<bool> { co_return co_await write(": keepalive\n\n"); });
  watch->end();
  socket.shutdown(net::socket_base::shutdown_both, ec);
  socket.close(ec);
  while (!*reader_done) co_await log->changed().wait_until(Notifier::Clock::time_point::max());
}

}  // namespace cabin::http_api
