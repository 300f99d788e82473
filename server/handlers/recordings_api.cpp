// Screen recordings: started, stopped, listed and deleted through SessionManager; a recording's
// video is streamed from cabind's state dir once kept, or from the sandbox while it grows.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <optional>

#include "common/json_fields.h"
#include "common/sealed_stream.h"
#include "common/unique_fd.h"
#include "server/api/errors.h"
#include "server/api/session_spec.h"
#include "server/handlers/api.h"

namespace cabin::http_api {
using nlohmann::json;

namespace {

constexpr auto kVideoStall = std::chrono::seconds(60);

Result<api::RecordingSpec> recording_spec(const std::string& body) {
  if (body.empty()) return api::RecordingSpec{};
  auto j = parse_object(body);
  if (!j) return j.error();
  return api::parse_recording_spec(*j);
}

}  // namespace

net::awaitable<Response> Api::recordings(const api::Route& route, const Authn& authn,
                                         const Request& req) {
  using api::RouteId;
  switch (route.id) {
    case RouteId::kStartRecording: {
      auto spec = recording_spec(req.body());
      if (!spec) co_return error_response(spec.error());
      auto r = co_await sessions_.start_recording(route.session_id, *spec, tenant_of(authn));
      if (!r) co_return error_response(r.error());
      co_return json_response(http::status::created, *r);
    }
    case RouteId::kListRecordings: {
      auto list = sessions_.recordings(route.session_id);
      if (!list) co_return error_response(list.error());
      co_return json_response(http::status::ok, {{"recordings", *list}});
    }
    case RouteId::kStopRecording: {
      auto r = co_await sessions_.stop_recording(route.session_id, route.recording_id);
      if (!r) co_return error_response(r.error());
      co_return json_response(http::status::ok, *r);
    }
    case RouteId::kDeleteRecording: {
      auto r = co_await sessions_.delete_recording(route.session_id, route.recording_id);
      if (!r) co_return error_response(r.error());
      co_return json_response(http::status::ok, {{"id", route.recording_id}});
    }
    default:
      co_return error_response(api::errors::not_found_endpoint());
  }
}

net::awaitable<void> Api::recording_video(const api::Route& route, ClientStream socket) {
  boost::system::error_code ec;
  auto r = sessions_.recording(route.session_id, route.recording_id);
  if (!r) {
    co_await refuse_connection(socket,
                               error_response(api::errors::recording_not_found()));
    co_return;
  }
  if (r->value("status", "") == "recording") {
    // What the sandbox has written so far: fragments that play up to the latest.
    auto s = sessions_.find(route.session_id);
    const std::string path = sessions_.live_recording_path(route.session_id, route.recording_id);
    if (!s || path.empty()) {
      co_await refuse_connection(socket, error_response(api::errors::session_not_found()));
      co_return;
    }
    auto file = co_await s->agent().read_file(path);
    s.reset();
    if (!file) {
      co_await refuse_connection(socket, error_response(file.error()));
      co_return;
    }
    (void)co_await send_agent_file(socket, *file, "video/mp4");
    co_return;
  }
  UniqueFd fd(::open(sessions_.recording_file(route.session_id, route.recording_id).c_str(),
                     O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    co_await refuse_connection(
        socket, error_response(make_error(Errc::kNotFound, "recording_not_found",
                                          "the recording has no video (it failed)")));
    co_return;
  }
  // Sealed at rest (older recordings were kept in the clear): opened piece by piece as it goes.
  std::optional<StreamOpener> opener;
  uint64_t length = static_cast<uint64_t>(st.st_size);
  if (is_sealed_stream(fd.get())) {
    auto plain = sealed_plain_size(fd.get());
    auto o = plain ? StreamOpener::open(fd.get(), sessions_.recordings_key(),
                                        sessions::SessionManager::recording_context(
                                            route.session_id, route.recording_id))
                   : Result<StreamOpener>(plain.error());
    if (!o) {
      co_await refuse_connection(
          socket, error_response(make_error(Errc::kNotFound, "recording_not_found",
                                            "the recording's file does not open (changed, or "
                                            "sealed with another key): " +
                                                o.error().message)));
      co_return;
    }
    length = *plain;
    opener.emplace(std::move(*o));
  }
  const std::string h =
      "HTTP/1.1 200 OK\r\nServer: cabind\r\nContent-Type: video/mp4\r\n"
      "Content-Length: " +
      std::to_string(length) + "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
  socket.tcp().expires_after(kVideoStall);
  co_await net::async_write(socket, net::buffer(h), net::redirect_error(net::use_awaitable, ec));
  std::string chunk(256 * 1024, '\0');
  while (!ec) {
    std::string_view piece;
    if (opener) {
      if (opener->done()) break;
      auto next = opener->next();
      if (!next) break;  // the client sees the body end short: the file was changed
      chunk = std::move(*next);
      piece = chunk;
    } else {
      const ssize_t n = ::read(fd.get(), chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      piece = std::string_view(chunk.data(), static_cast<size_t>(n));
    }
    if (piece.empty()) continue;
    socket.tcp().expires_after(kVideoStall);
    co_await net::async_write(socket, net::buffer(piece.data(), piece.size()),
                              net::redirect_error(net::use_awaitable, ec));
  }
  socket.shutdown(net::socket_base::shutdown_send, ec);
}

}  // namespace cabin::http_api
