#include "server/handlers/frame_hub.h"

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>

#include "common/frame_stream.h"
#include "common/log.h"
#include "common/notifier.h"
#include "common/spawn.h"
#include "common/ws_frames.h"
#include "server/api/computer_wire.h"
#include "server/api/errors.h"
#include "server/http/websocket.h"
#include "server/http/write_watch.h"
#include "server/metrics/metrics.h"

namespace cabin::http_api {

struct Frame {
  std::string bytes;
  int width = 0;
  int height = 0;
  uint64_t seq = 0;
};

// One agent stream and the newest frame it delivered. The read loop and every viewer hold it;
// the last viewer to leave closes the agent stream, which ends the read loop.
struct FrameFeed {
  explicit FrameFeed(net::any_io_executor ex) : changed(ex) {}
  std::optional<sessions::Tunnel> tunnel;  // set once the agent accepted the stream
  Notifier changed;                        // a frame arrived, the feed ended, a viewer left
  std::shared_ptr<const Frame> latest;
  bool opening = true;
  bool ended = false;
  std::string end_reason;
  size_t viewers = 0;

  void end(std::string reason) {
    if (ended) return;
    ended = true;
    end_reason = std::move(reason);
    if (tunnel) {
      boost::system::error_code ignored;
      tunnel->stream.close(ignored);
    }
    changed.notify_all();
  }
};

namespace {

const auto& log() {
  static auto l = logger("frames");
  return l;
}

// Reads frames until the agent's stream ends or fails; every frame replaces the one before.
net::awaitable<void> read_feed(std::shared_ptr<FrameFeed> feed, std::function<void()> done) {
  auto& t = *feed->tunnel;
  boost::system::error_code ec;
  uint64_t seq = 0;
  std::string reason = "the session's screen stream ended";
  while (!feed->ended) {
    // Straight into the flat_buffer's storage: Asio's dynamic-buffer reads work on a copy of
    // a Beast buffer object, and what they read would not land in this one.
    while (!ec && t.buffer.size() < frames::kFrameHeaderSize) {
      const size_t n = co_await t.stream.async_read_some(
          t.buffer.prepare(64 * 1024), net::redirect_error(net::use_awaitable, ec));
      t.buffer.commit(n);
    }
    if (ec) break;
    std::array<uint8_t, frames::kFrameHeaderSize> head;
    net::buffer_copy(net::buffer(head), t.buffer.data());
    auto h = frames::decode_header(head);
    if (!h) {
      reason = h.error().message;
      log()->warn("frame stream: {}", reason);
      break;
    }
    // An encoded image is never larger than its raw pixels: a header that says otherwise lies.
    if (static_cast<int64_t>(h->length) > api::image_bytes_limit(h->width, h->height)) {
      reason = "a frame's length does not fit its size";
      log()->warn("frame stream: {}", reason);
      break;
    }
    t.buffer.consume(head.size());
    auto frame = std::make_shared<Frame>();
    // Grown as the bytes arrive, not from the header's word: a header alone costs nothing.
    const size_t have = std::min<size_t>(t.buffer.size(), h->length);
    frame->bytes.assign(static_cast<const char*>(t.buffer.data().data()), have);
    t.buffer.consume(have);
    while (!ec && frame->bytes.size() < h->length) {
      const size_t old = frame->bytes.size();
      const size_t want = std::min<size_t>(h->length - old, 256 * 1024);
      frame->bytes.resize(old + want);
      const size_t n =
          co_await t.stream.async_read_some(net::buffer(frame->bytes.data() + old, want),
                                            net::redirect_error(net::use_awaitable, ec));
      frame->bytes.resize(old + n);
    }
    if (ec) break;
    frame->width = h->width;
    frame->height = h->height;
    frame->seq = ++seq;
    feed->latest = std::move(frame);
    feed->changed.notify_all();
  }
  feed->end(reason);
  done();
}

// Waits for a frame newer than `seen`, or until the feed ends or `gone` or `leaving` is set.
// Null: stop.
// The next frame after `seen`; null when the viewer or the feed ends, or (`idle` set) when
// `until` passes first.
net::awaitable<std::shared_ptr<const Frame>> next_frame(FrameFeed& feed, uint64_t seen,
                                                        const bool& gone, const bool& leaving,
                                                        Notifier::Clock::time_point until,
                                                        bool* idle) {
  for (;;) {
    if (gone || leaving || feed.ended) co_return nullptr;
    if (feed.latest && feed.latest->seq > seen) co_return feed.latest;
    const bool woken = co_await feed.changed.wait_until(until);
    if (!woken && Notifier::Clock::now() >= until) {
      if (idle) *idle = true;
      co_return nullptr;
    }
  }
}

// Counts a viewer in; the last one out ends the feed.
class Viewing {
 public:
  explicit Viewing(std::shared_ptr<FrameFeed> f) : feed_(std::move(f)) { ++feed_->viewers; }
  ~Viewing() {
    if (--feed_->viewers == 0) feed_->end("no viewers left");
  }
  Viewing(const Viewing&) = delete;
  Viewing& operator=(const Viewing&) = delete;

 private:
  std::shared_ptr<FrameFeed> feed_;
};

constexpr std::chrono::milliseconds kNoRepeat{0};
constexpr std::chrono::milliseconds kMjpegRepeatAfter{500};

// The viewers' readers: they only notice the client leaving, and wake the writer then. Free
// functions with by-value parameters, not capturing lambdas: GCC 12 mishandles the captures of
// lambda coroutines spawned this way (they get destroyed twice).
net::awaitable<void> watch_websocket(WebSocket& ws, std::shared_ptr<bool> gone,
                                     std::shared_ptr<FrameFeed> feed) {
  beast::flat_buffer in;
  boost::system::error_code ec;
  while (!ec) {
    in.clear();
    co_await ws.async_read(in, net::redirect_error(net::use_awaitable, ec));
  }
  *gone = true;
  feed->changed.notify_all();
}

net::awaitable<void> watch_socket(ClientStream& socket, std::shared_ptr<bool> gone,
                                  std::shared_ptr<FrameFeed> feed) {
  std::array<char, 512> buf;
  boost::system::error_code ec;
  while (!ec) {
    co_await socket.async_read_some(net::buffer(buf), net::redirect_error(net::use_awaitable, ec));
  }
  *gone = true;
  feed->changed.notify_all();
}

// Writes the newest frame with `write` (a callable that starts the write and returns what to
// co_await; not a coroutine itself) until the viewer leaves, the feed ends, cabind is leaving or
// a write fails.
// A frame that arrives while one is written replaces any before it: a slow viewer skips frames
// and never builds a queue. Returns the frames sent.
template <typename Write>
// `repeat_after` (not zero): once the screen has been still that long, the last frame is sent
// once more.
net::awaitable<size_t> send_frames(FrameFeed& feed, const bool& gone, const bool& leaving,
                                   ClientStream& socket,
                                   std::chrono::steady_clock::duration write_timeout, Write write,
                                   boost::system::error_code& ec,
                                   std::chrono::milliseconds repeat_after) {
  auto watch = std::make_shared<WriteWatch>(socket.get_executor());
  cabin::spawn(socket.get_executor(), watch_writes(watch, socket, write_timeout, "a frame viewer"),
               "frame viewer's write watch");
  uint64_t seen = 0;
  size_t sent = 0;
  std::shared_ptr<const Frame> last;
  bool repeated = true;
  while (!ec) {
    bool idle = false;
    Notifier::Clock::time_point until = Notifier::Clock::time_point::max();
    if (repeat_after.count() > 0 && !repeated) until = Notifier::Clock::now() + repeat_after;
    auto frame = co_await next_frame(feed, seen, gone, leaving, until, &idle);
    if (idle) {
      frame = last;
      repeated = true;
    } else if (!frame) {
      break;
    } else {
      last = frame;
      repeated = false;
    }
    watch->begin();
    const size_t n = co_await write(*frame);
    watch->done();
    if (!ec) count_bytes(metrics::relay_counts(metrics::Relay::kFrames).down, n);
    seen = frame->seq;
    ++sent;
  }
  watch->end();
  co_return sent;
}

// The watcher holds the viewer's stream by reference: the viewer waits for it before leaving.
net::awaitable<void> wait_gone(FrameFeed& feed, const bool& gone) {
  while (!gone) co_await feed.changed.wait_until(Notifier::Clock::time_point::max());
}

}  // namespace

net::awaitable<std::shared_ptr<FrameFeed>> FrameHub::join_or_refuse(sessions::SessionPtr session,
                                                                    const std::string& agent_query,
                                                                    ClientStream& socket) {
  auto joined = co_await join(session, agent_query);
  session.reset();  // a viewer must not keep an ended session alive
  if (!joined) {
    co_await refuse_connection(socket, error_response(joined.error()));
    co_return nullptr;
  }
  co_return std::move(*joined);
}

net::awaitable<Result<std::shared_ptr<FrameFeed>>> FrameHub::join(
    const sessions::SessionPtr& session, const std::string& agent_query) {
  const std::string key = session->id() + ' ' + agent_query;
  if (auto it = feeds_.find(key); it != feeds_.end()) {
    auto feed = it->second;
    // Another viewer is opening it: wait for the outcome rather than open a second stream.
    while (feed->opening) co_await feed->changed.wait_until(Notifier::Clock::time_point::max());
    if (!feed->ended) co_return feed;
  }
  // Each feed is a capture and an encode in the agent: a session's viewers share a few.
  const std::string prefix = session->id() + ' ';
  size_t open = 0;
  for (auto it = feeds_.lower_bound(prefix); it != feeds_.end() && it->first.starts_with(prefix);
       ++it)
    ++open;
  if (open >= kMaxFeedsPerSession) {
    co_return api::errors::too_many_streams("a session streams at most " +
                                            std::to_string(kMaxFeedsPerSession) +
                                            " different kinds of frames at once");
  }
  auto ex = co_await net::this_coro::executor;
  auto feed = std::make_shared<FrameFeed>(ex);
  feeds_[key] = feed;
  auto tunnel = co_await session->open_frames(agent_query);
  feed->opening = false;
  if (!tunnel) {
    feed->end(tunnel.error().message);
    if (auto it = feeds_.find(key); it != feeds_.end() && it->second == feed) feeds_.erase(it);
    co_return tunnel.error();
  }
  feed->tunnel.emplace(std::move(*tunnel));
  feed->changed.notify_all();
  cabin::spawn(ex,
               read_feed(feed,
                         [this, key, weak = std::weak_ptr<FrameFeed>(feed)] {
                           auto it = feeds_.find(key);
                           if (it != feeds_.end() && it->second == weak.lock()) feeds_.erase(it);
                         }),
               "session " + session->id() + ": frame feed");
  co_return feed;
}

net::awaitable<void> FrameHub::serve_websocket(sessions::SessionPtr session,
                                               std::string agent_query, std::string format, int fps,
                                               http::request<http::string_body> req,
                                               ClientStream socket) {
  const std::string id = session->id();
  auto feed = co_await join_or_refuse(std::move(session), agent_query, socket);
  if (!feed) co_return;
  Viewing viewing(feed);

  WebSocket ws(std::move(socket));
  ws.read_message_max(4096);  // viewers have nothing to say beyond control frames
  ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
  ws.set_option(websocket::stream_base::decorator(
      [](websocket::response_type& res) { res.set(http::field::server, "cabind"); }));
  boost::system::error_code ec;
  co_await ws.async_accept(req, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;

  // Beast answers pings and the close handshake while the watcher reads. It holds `ws` by
  // reference: this coroutine does not return before `gone` is set.
  auto gone = std::make_shared<bool>(false);
  cabin::spawn(co_await net::this_coro::executor, watch_websocket(ws, gone, feed),
               "session " + id + ": frame viewer's reader");

  // At shutdown the writer stops between two frames and says why.
  auto leaving = std::make_shared<bool>(false);
  beast::get_lowest_layer(ws).on_going_away(
      [leaving, weak = std::weak_ptr<FrameFeed>(feed)] {
        *leaving = true;
        if (auto feed = weak.lock()) feed->changed.notify_all();
      });

  nlohmann::json hello = {
      {"type", "hello"}, {"format", format}, {"fps", fps}, {"viewers", feed->viewers}};
  ws.text(true);
  co_await ws.async_write(net::buffer(hello.dump()), net::redirect_error(net::use_awaitable, ec));
  ws.binary(true);
  const size_t sent = co_await send_frames(
      *feed, *gone, *leaving, beast::get_lowest_layer(ws), write_timeout_,
      [&](const Frame& f) {
        return ws.async_write(net::buffer(f.bytes), net::redirect_error(net::use_awaitable, ec));
      },
      ec, kNoRepeat);
  if (!*gone && !ec) {
    websocket::close_reason why(websocket::close_code::going_away,
                                *leaving ? std::string(ws::kGoingAwayReason)
                                         : feed->end_reason.substr(0, 120));
    co_await ws.async_close(why, net::redirect_error(net::use_awaitable, ec));
  }
  // The reader must finish before `ws` goes out of scope.
  beast::get_lowest_layer(ws).close(ec);
  co_await wait_gone(*feed, *gone);
  log()->debug("session {}: frame viewer left after {} frames", id, sent);
}

net::awaitable<void> FrameHub::serve_mjpeg(sessions::SessionPtr session, std::string agent_query,
                                           ClientStream socket) {
  auto feed = co_await join_or_refuse(std::move(session), agent_query, socket);
  if (!feed) co_return;
  Viewing viewing(feed);
  static constexpr std::string_view kHead =
      "HTTP/1.1 200 OK\r\nServer: cabind\r\n"
      "Content-Type: multipart/x-mixed-replace; boundary=cabinframe\r\n"
      "Cache-Control: no-store\r\nConnection: close\r\n\r\n";
  boost::system::error_code ec;
  co_await net::async_write(socket, net::buffer(kHead),
                            net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;

  auto gone = std::make_shared<bool>(false);
  cabin::spawn(co_await net::this_coro::executor, watch_socket(socket, gone, feed),
               "MJPEG viewer's reader");

  std::string head;
  std::array<net::const_buffer, 3> parts;
  const bool leaving = false;  // an HTTP answer has no way to say why it ends
  co_await send_frames(
      *feed, *gone, leaving, socket, write_timeout_,
      [&](const Frame& f) {
        head = "--cabinframe\r\nContent-Type: image/jpeg\r\nContent-Length: " +
               std::to_string(f.bytes.size()) + "\r\n\r\n";
        parts = {net::buffer(head), net::buffer(f.bytes), net::buffer("\r\n", 2)};
        return net::async_write(socket, parts, net::redirect_error(net::use_awaitable, ec));
      },
      ec,
      // A browser shows a part only once the next part's headers have come, and a still
      // screen sends no next frame: the last one, again, closes it.
      kMjpegRepeatAfter);
  socket.shutdown(net::socket_base::shutdown_both, ec);
  socket.close(ec);
  co_await wait_gone(*feed, *gone);
}

}  // namespace cabin::http_api
