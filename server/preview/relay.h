// The preview proxy's relay stages, as templates over the streams so that they run over Beast's
// test streams too: a message's body relayed as it comes, and the app's answer head.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/container/static_vector.hpp>
#include <charconv>
#include <chrono>
#include <functional>
#include <limits>
#include <string_view>

#include "common/byte_count.h"
#include "server/preview/proxy_head.h"

namespace cabin::preview {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

inline constexpr size_t kMaxUpstreamHeader = 16 * 1024;
inline constexpr size_t kRelayChunk = 64 * 1024;

// Writes a message out as the relay goes: the head while it is unsent, each body piece in the
// outgoing framing, and the chunked terminator with the last piece, gathered into one write.
template <typename Out>
class BodyWriter {
 public:
  BodyWriter(Out& out, std::string_view head, bool chunked, ShardedCount* counted = nullptr)
      : out_(out), head_(head), chunked_(chunked), counted_(counted) {}

  bool head_sent() const { return head_sent_; }

  // Writes what `piece` and `last` add; not a coroutine of its own (each one costs a frame).
  auto write(std::string_view piece, bool last, boost::system::error_code& ec) {
    bufs_.clear();
    if (!head_sent_) bufs_.push_back(net::buffer(head_));
    if (!piece.empty()) {
      if (chunked_) {
        auto [end, _] = std::to_chars(size_line_, size_line_ + 16, piece.size(), 16);
        *end++ = '\r';
        *end++ = '\n';
        bufs_.push_back(net::buffer(size_line_, end - size_line_));
      }
      bufs_.push_back(net::buffer(piece));
      if (chunked_) bufs_.push_back(net::buffer(kCrlf));
    }
    if (last && chunked_) bufs_.push_back(net::buffer(kLastChunk));
    head_sent_ = true;
    // Counted as it is handed over: the write failing ends the relay anyway.
    count_bytes(counted_, net::buffer_size(bufs_));
    return net::async_write(out_, bufs_, net::redirect_error(net::use_awaitable, ec));
  }

 private:
  static constexpr std::string_view kCrlf = "\r\n";
  static constexpr std::string_view kLastChunk = "0\r\n\r\n";
  Out& out_;
  std::string_view head_;
  bool chunked_;
  ShardedCount* counted_;
  bool head_sent_ = false;
  boost::container::static_vector<net::const_buffer, 5> bufs_;
  char size_line_[20];
};

// Sees each body piece before it is written; false stops the relay there, that piece unwritten
// (the relay answers operation_aborted).
using BodyInspect = std::function<bool(std::string_view piece)>;

// Sends `head`, then the body that `p` (its header parsed) frames, read from `in` as it comes
// (its first bytes may already be in in_buf) and written to `out` at once: nothing is buffered
// beyond one piece, so large bodies and event streams flow through. A Content-Length body is
// copied as it is; a chunked or EOF-delimited one goes through Beast's parser. `progress`, if
// given, is stamped each time bytes arrive; `counted`, if given, counts the bytes written.
template <bool isRequest, typename In, typename Out>
net::awaitable<boost::system::error_code> relay(In& in, beast::flat_buffer& in_buf,
                                                http::parser<isRequest, http::buffer_body>& p,
                                                Out& out, std::string_view head, Framing framing,
                                                char* buffer,
                                                std::chrono::steady_clock::time_point* progress,
                                                ShardedCount* counted = nullptr,
                                                BodyInspect inspect = {}) {
  auto stamp = [progress] {
    if (progress) *progress = std::chrono::steady_clock::now();
  };
  BodyWriter<Out> w(out, head, framing == Framing::kChunked, counted);
  auto refused = [&inspect](std::string_view piece) {
    return inspect && !piece.empty() && !inspect(piece);
  };
  boost::system::error_code ec;
  if (p.is_done()) {
    co_await w.write({}, true, ec);
    co_return ec;
  }
  if (!p.chunked() && p.content_length()) {
    std::uint64_t left = *p.content_length();
    size_t take = static_cast<size_t>(std::min<std::uint64_t>(left, in_buf.size()));
    const std::string_view first(static_cast<const char*>(in_buf.data().data()), take);
    if (refused(first)) co_return net::error::operation_aborted;
    // With nothing buffered yet the head goes out alone, before the body starts.
    co_await w.write(first, take == left, ec);
    in_buf.consume(take);
    left -= take;
    while (!ec && left > 0) {
      size_t n = co_await in.async_read_some(
          net::buffer(buffer, static_cast<size_t>(std::min<std::uint64_t>(left, kRelayChunk))),
          net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      stamp();
      left -= n;
      if (refused({buffer, n})) co_return net::error::operation_aborted;
      co_await w.write({buffer, n}, left == 0, ec);
    }
    co_return ec;
  }
  for (;;) {
    if (!w.head_sent() && in_buf.size() == 0) {
      co_await w.write({}, false, ec);  // a stream that starts slowly gets its head at once
      if (ec) co_return ec;
    }
    p.get().body().data = buffer;
    p.get().body().size = kRelayChunk;
    co_await http::async_read_some(in, in_buf, p, net::redirect_error(net::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return ec;
    stamp();
    size_t n = kRelayChunk - p.get().body().size;
    bool done = p.is_done();
    if (refused({buffer, n})) co_return net::error::operation_aborted;
    if (n > 0 || done) co_await w.write({buffer, n}, done, ec);
    if (ec || done) co_return ec;
  }
}

// Reads the app's answer head into `parsed` (a fresh parser each time), passing over interim
// answers (1xx but 101, such as 103 Early Hints), which are not relayed. `head_request`: the
// answer has no body whatever it says.
template <typename In>
net::awaitable<boost::system::error_code> read_answer_head(
    In& in, beast::flat_buffer& in_buf,
    std::optional<http::response_parser<http::buffer_body>>& parsed, bool head_request) {
  boost::system::error_code ec;
  for (;;) {
    parsed.emplace();
    parsed->header_limit(kMaxUpstreamHeader);
    parsed->body_limit((std::numeric_limits<std::uint64_t>::max)());
    if (head_request) parsed->skip(true);
    co_await http::async_read_header(in, in_buf, *parsed,
                                     net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return ec;
    const int status = parsed->get().result_int();
    if (status < 100 || status >= 200 || status == 101) co_return ec;
  }
}

}  // namespace cabin::preview
