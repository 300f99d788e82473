// The sandbox's files through the API: bytes stream between the client and the agent in
// pieces, so a 500 MB upload or download costs cabind a buffer, not the file.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <charconv>

#include "common/agent_protocol.h"
#include "common/ascii.h"
#include "common/clock.h"
#include "common/deadline.h"
#include "server/api/errors.h"
#include "server/handlers/api.h"

namespace cabin::http_api {
using nlohmann::json;

namespace {

constexpr size_t kChunk = 256 * 1024;

// The path or dir of the query, checked: exactly one of them.
Result<std::pair<std::string, std::string>> file_query(const api::Route& route, bool dir_allowed) {
  const auto path = route.query.find("path");
  const auto dir = route.query.find("dir");
  if ((path == route.query.end()) == (dir == route.query.end()) ||
      (dir != route.query.end() && !dir_allowed)) {
    return make_error(
        Errc::kInvalidArgument, "invalid_request",
        dir_allowed ? "give ?path= (a file) or ?dir= (a directory)" : "give ?path= (a file)");
  }
  const bool is_dir = dir != route.query.end();
  auto checked = agent_protocol::check_file_path(is_dir ? dir->second : path->second);
  if (!checked) return checked.error();
  return std::pair{std::string(is_dir ? "dir" : "path"), std::move(*checked)};
}

// Content-Disposition for a file called `name`: RFC 6266's filename* carries any UTF-8.
std::string attachment(std::string_view name) {
  std::string ascii;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    ascii.push_back(u < 0x20 || u >= 0x7F || c == '"' || c == '\\' ? '_' : c);
  }
  return "attachment; filename=\"" + ascii + "\"; filename*=UTF-8''" + percent_encode(name);
}

// Each read or write of a transfer gets kFileTransferStall: a peer that stops is cut off then.
int arm(ClientStream& s) {
  s.tcp().expires_after(kFileTransferStall);
  return 0;
}
std::unique_ptr<Deadline<drivers::AgentStream>> arm(drivers::AgentStream& s) {
  return std::make_unique<Deadline<drivers::AgentStream>>(s, kFileTransferStall);
}

// Writes `early` (bytes already read), then moves `n` more bytes from `from` to `to`.
template <typename From, typename To>
net::awaitable<Result<void>> copy_bytes(From& from, To& to, uint64_t n, std::string_view early,
                                        const char* from_name) {
  boost::system::error_code ec;
  if (!early.empty()) {
    [[maybe_unused]] const auto armed = arm(to);
    co_await net::async_write(to, net::buffer(early), net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return make_error(Errc::kBadGateway, "transfer_failed", ec.message());
  }
  std::string chunk(kChunk, '\0');
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), n));
    size_t got = 0;
    {
      [[maybe_unused]] const auto armed = arm(from);
      got = co_await from.async_read_some(net::buffer(chunk.data(), want),
                                          net::redirect_error(net::use_awaitable, ec));
    }
    if (ec) {
      co_return make_error(
          Errc::kInvalidArgument, "upload_incomplete",
          std::string(from_name) + " stopped " + std::to_string(n) + " bytes early");
    }
    n -= got;
    [[maybe_unused]] const auto armed = arm(to);
    co_await net::async_write(to, net::buffer(chunk.data(), got),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return make_error(Errc::kBadGateway, "transfer_failed", ec.message());
  }
  co_return Result<void>{};
}

}  // namespace

json file_listing(const std::string& dir, const std::vector<agent_protocol::FileEntry>& entries) {
  json list = json::array();
  for (const auto& e : entries) {
    list.push_back({{"name", e.name},
                    {"path", (dir == "/" ? "" : dir) + "/" + e.name},
                    {"type", e.type},
                    {"size", e.size},
                    {"modified_at", format_rfc3339(e.mtime)}});
  }
  return {{"dir", dir}, {"entries", std::move(list)}};
}

net::awaitable<Result<void>> send_agent_file(ClientStream& socket, sessions::Tunnel& file,
                                             std::string_view content_type,
                                             std::string_view more_fields) {
  boost::system::error_code ec;
  std::string head = "HTTP/1.1 200 OK\r\nServer: cabind\r\nContent-Type: ";
  head.append(content_type)
      .append("\r\nContent-Length: ")
      .append(std::to_string(*file.length))
      .append("\r\n")
      .append(more_fields)
      .append("Cache-Control: no-store\r\nConnection: close\r\n\r\n");
  socket.tcp().expires_after(kFileTransferStall);
  co_await net::async_write(socket, net::buffer(head), net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return make_error(Errc::kBadGateway, "transfer_failed", ec.message());
  const std::string_view ahead(
      static_cast<const char*>(file.buffer.data().data()),
      static_cast<size_t>(std::min<uint64_t>(file.buffer.size(), *file.length)));
  auto copied =
      co_await copy_bytes(file.stream, socket, *file.length - ahead.size(), ahead, "the agent");
  socket.shutdown(net::socket_base::shutdown_send, ec);
  co_return copied;
}

net::awaitable<void> Api::get_files(const api::Route& route, ClientStream socket) {
  boost::system::error_code ec;
  auto s = sessions_.find(route.session_id);
  if (!s) {
    co_await refuse_connection(socket, error_response(api::errors::session_not_found()));
    co_return;
  }
  auto q = file_query(route, true);
  if (!q) {
    co_await refuse_connection(socket, error_response(q.error()));
    co_return;
  }
  if (q->first == "dir") {
    auto entries = co_await s->agent().list_files(q->second);
    if (!entries) {
      co_await refuse_connection(socket, error_response(entries.error()));
      co_return;
    }
    Response res = json_response(http::status::ok, file_listing(q->second, *entries));
    res.keep_alive(false);
    socket.tcp().expires_after(kFileTransferStall);
    co_await http::async_write(socket, res, net::redirect_error(net::use_awaitable, ec));
    socket.shutdown(net::socket_base::shutdown_send, ec);
    co_return;
  }
  auto file = co_await s->agent().read_file(q->second);
  s.reset();  // a download must not keep an ended session alive
  if (!file) {
    co_await refuse_connection(socket, error_response(file.error()));
    co_return;
  }
  const std::string name = q->second.substr(q->second.rfind('/') + 1);
  auto sent = co_await send_agent_file(socket, *file, "application/octet-stream",
                                       "Content-Disposition: " + attachment(name) + "\r\n");
  if (!sent)
    api_log().warn("session {}: a download stopped: {}", route.session_id, sent.error().message);
}

net::awaitable<void> Api::put_file(const api::Route& route, const Authn& authn, Request req,
                                   ClientStream socket, beast::flat_buffer buffer) {
  boost::system::error_code ec;
  auto answer = [&](Response res) -> net::awaitable<void> {
    if (audit_) {
      if (auto entry = audit_entry(route, authn, req, res)) audit_->record(std::move(*entry));
    }
    co_await refuse_connection(socket, std::move(res));
  };
  auto s = sessions_.find(route.session_id);
  if (!s) co_return co_await answer(error_response(api::errors::session_not_found()));
  auto q = file_query(route, false);
  if (!q) co_return co_await answer(error_response(q.error()));
  uint64_t size = 0;
  const auto length = req[http::field::content_length];
  if (req.find(http::field::transfer_encoding) != req.end() || length.empty() ||
      std::from_chars(length.data(), length.data() + length.size(), size).ec != std::errc()) {
    co_return co_await answer(error_response(
        make_error(Errc::kInvalidArgument, "length_required", "an upload needs a Content-Length")));
  }
  const uint64_t limit = config_.max_upload_mb * 1024 * 1024;
  if (size > limit) {
    co_return co_await answer(error_response(
        make_error(Errc::kTooLarge, "upload_too_large",
                   "an upload may be at most " + std::to_string(config_.max_upload_mb) + " MiB")));
  }
  auto upload = co_await s->agent().start_upload(q->second, size);
  s.reset();
  if (!upload) co_return co_await answer(error_response(upload.error()));
  // The client may wait for this before it sends the body (curl does, for large files).
  if (iequals(req[http::field::expect], "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    socket.tcp().expires_after(kFileTransferStall);
    co_await net::async_write(socket, net::buffer(kContinue),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
  }
  const std::string_view ahead(static_cast<const char*>(buffer.data().data()),
                               static_cast<size_t>(std::min<uint64_t>(buffer.size(), size)));
  auto copied =
      co_await copy_bytes(socket, upload->stream, size - ahead.size(), ahead, "the client");
  if (!copied) co_return co_await answer(error_response(copied.error()));
  auto stored = co_await sessions::AgentClient::upload_answer(*upload);
  if (!stored) co_return co_await answer(error_response(stored.error()));
  Response res = json_response(
      http::status::ok, {{"path", q->second}, {"size", stored->size}, {"sha256", stored->sha256}});
  res.keep_alive(false);
  if (audit_) {
    if (auto entry = audit_entry(route, authn, req, res)) audit_->record(std::move(*entry));
  }
  socket.tcp().expires_after(kFileTransferStall);
  co_await http::async_write(socket, res, net::redirect_error(net::use_awaitable, ec));
  socket.shutdown(net::socket_base::shutdown_send, ec);
}

net::awaitable<Response> Api::delete_file(const api::Route& route) {
  auto s = sessions_.find(route.session_id);
  if (!s) co_return error_response(api::errors::session_not_found());
  auto q = file_query(route, false);
  if (!q) co_return error_response(q.error());
  if (auto r = co_await s->agent().remove_file(q->second); !r) co_return error_response(r.error());
  co_return json_response(http::status::ok, {{"path", q->second}});
}

Response Api::list_downloads(const api::Route& route) const {
  auto s = sessions_.find(route.session_id);
  if (!s) return error_response(api::errors::session_not_found());
  json list = json::array();
  for (const auto& d : s->downloads()) list.push_back(d);
  return json_response(http::status::ok, {{"downloads", std::move(list)}});
}

}  // namespace cabin::http_api
