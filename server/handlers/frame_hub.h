// Frame streams of a session's screen: a WebSocket of images and a multipart/x-mixed-replace
// JPEG stream. Viewers asking for the same frames of one session share one agent stream, so
// one capture and one encode serve them all.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "server/http/client_stream.h"
#include "server/http/responses.h"
#include "server/sessions/session.h"

namespace cabin::http_api {

namespace net = boost::asio;
namespace beast = boost::beast;

struct FrameFeed;

// Distinct frame streams (format, size, fps) of one session open at once.
inline constexpr size_t kMaxFeedsPerSession = 8;
// How long one frame's write may take: a viewer that stops reading is cut off then, rather than
// hold its connection for ever.
inline constexpr std::chrono::seconds kFrameWriteTimeout{30};

class FrameHub {
 public:
  explicit FrameHub(std::chrono::steady_clock::duration write_timeout = kFrameWriteTimeout)
      : write_timeout_(write_timeout) {}
  FrameHub(const FrameHub&) = delete;
  FrameHub& operator=(const FrameHub&) = delete;

  // The WebSocket viewer. `agent_query` is the checked query for /agent/v1/frames; it names the
  // frames, so equal queries share a feed. `format` is "png" or "jpeg", for the hello message.
  net::awaitable<void> serve_websocket(sessions::SessionPtr session, std::string agent_query,
                                       std::string format, int fps,
                                       http::request<http::string_body> req, ClientStream socket);
  // The MJPEG viewer: answers 200 and writes one JPEG part per frame until the client leaves.
  net::awaitable<void> serve_mjpeg(sessions::SessionPtr session, std::string agent_query,
                                   ClientStream socket);

  // Feeds open now (for tests and /v1/info).
  size_t feeds() const { return feeds_.size(); }

 private:
  // Joins the feed for (session, query), opening it when there is none. Error: the agent
  // refused the stream (bad query for this screen, display not ready).
  net::awaitable<Result<std::shared_ptr<FrameFeed>>> join(const sessions::SessionPtr& session,
                                                          const std::string& agent_query);
  // join, then let go of the session; a refusal is answered on `socket` (null comes back).
  net::awaitable<std::shared_ptr<FrameFeed>> join_or_refuse(sessions::SessionPtr session,
                                                            const std::string& agent_query,
                                                            ClientStream& socket);

  std::map<std::string, std::shared_ptr<FrameFeed>> feeds_;  // key: session id + ' ' + query
  std::chrono::steady_clock::duration write_timeout_;
};

}  // namespace cabin::http_api
