#include "server/http/server.h"

#include <sys/socket.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <limits>
#include <optional>

#include "common/cancellation.h"
#include "common/cloexec.h"
#include "common/log.h"
#include "common/spawn.h"
#include "server/api/errors.h"

namespace cabin::http_api {
namespace {

const auto& log() {
  static auto l = logger("http");
  return l;
}

// Maps a parse failure to the answer the client gets before the connection closes.
Response parse_error_response(const boost::system::error_code& ec, const beast::flat_buffer& buf) {
  if (ec == http::error::header_limit) {
    // No line break yet: the request line alone is too long.
    std::string_view seen(static_cast<const char*>(buf.data().data()), buf.size());
    if (seen.find("\r\n") == std::string_view::npos) {
      return error_response(api::errors::uri_too_long("16 KiB"));
    }
    return error_response(api::errors::headers_too_large("16 KiB"));
  }
  if (ec == http::error::body_limit) {
    return error_response(api::errors::body_too_large("1 MiB"));
  }
  return error_response(api::errors::bad_request("malformed HTTP request: " + ec.message()));
}

// Closing with unread request bytes makes the kernel reset the connection, and the client may
// lose the answer it was sent. So: half-close, then read and drop what is still coming, bounded.
net::awaitable<void> linger(ClientStream& stream) {
  boost::system::error_code ec;
  stream.socket().shutdown(net::socket_base::shutdown_send, ec);
  stream.tcp().expires_after(kLingerTimeout);
  std::array<char, 16384> sink;
  size_t drained = 0;
  while (!ec && drained < kMaxLingerBytes) {
    // Raw TCP reads, under TLS too: the bytes are dropped unread.
    drained += co_await stream.tcp().async_read_some(net::buffer(sink),
                                                     net::redirect_error(net::use_awaitable, ec));
  }
  stream.close(ec);
}

// Closes a keep-alive connection that served no request for kIdleTimeout: one timer per
// connection, where a deadline on each read would arm and cancel a timer for every request.
struct IdleWatch {
  explicit IdleWatch(const net::any_io_executor& ex) : timer(ex) {}
  net::steady_timer timer;
  uint64_t requests = 0;  // served so far
  bool busy = false;      // a request is being served, however long it streams
  bool ended = false;     // the connection ended or was handed over: the socket is not ours
};

net::awaitable<void> watch_idle(std::shared_ptr<IdleWatch> w, net::ip::tcp::socket* socket) {
  uint64_t seen = w->requests;
  for (;;) {
    w->timer.expires_after(kIdleTimeout);
    boost::system::error_code ec;
    co_await w->timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (w->ended) co_return;
    if (w->busy || w->requests != seen) {
      seen = w->requests;
      continue;
    }
    // Idle: the pending header read ends, and with it the connection.
    socket->shutdown(net::socket_base::shutdown_both, ec);
    co_return;
  }
}

// Whether the client of a request being answered is still there.
struct ClientWatch {
  Cancellation gone;      // fires when the client closed its connection
  bool answered = false;  // the request is answered: the socket is the next request's
};

// Waits for the client's connection to turn readable while its request is answered: an EOF or
// an error there means the client left. Bytes (a pipelined request, TLS records) end the watch.
net::awaitable<void> watch_client(net::ip::tcp::socket& socket, std::shared_ptr<ClientWatch> w) {
  boost::system::error_code ec;
  co_await socket.async_wait(net::socket_base::wait_read,
                             net::redirect_error(net::use_awaitable, ec));
  if (w->answered || ec == net::error::operation_aborted) co_return;
  if (!ec) {
    char c;
    const ssize_t n = ::recv(socket.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
      co_return;
  }
  w->gone.cancel();
}

}  // namespace

Result<void> HttpServer::listen(const std::string& host, uint16_t port) {
  boost::system::error_code ec;
  auto addr = net::ip::make_address(host, ec);
  if (ec) return make_error(Errc::kInvalidArgument, "bad_listen", "not an IP address: " + host);
  net::ip::tcp::endpoint ep(addr, port);
  open_cloexec(acceptor_, ep.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return make_error(Errc::kUnavailable, "listen_failed",
                      "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  }
  return {};
}

HttpServer::Slot::Slot(std::shared_ptr<Counts> counts, net::ip::address peer)
    : counts_(std::move(counts)), peer_(peer) {
  ++counts_->total;
  ++counts_->per_peer[peer_];
}

HttpServer::Slot::~Slot() {
  if (!counts_) return;  // moved from
  --counts_->total;
  if (auto it = counts_->per_peer.find(peer_); it != counts_->per_peer.end() && --it->second == 0)
    counts_->per_peer.erase(it);
}

void HttpServer::note_accept_problem(const std::string& what) {
  const auto now = std::chrono::steady_clock::now();
  if (now - problem_logged_ < std::chrono::seconds(1)) {
    ++problems_unlogged_;
    return;
  }
  if (problems_unlogged_ > 0) {
    log()->warn("{} ({} more accept problems in the last second)", what, problems_unlogged_);
  } else {
    log()->warn("{}", what);
  }
  problem_logged_ = now;
  problems_unlogged_ = 0;
}

net::awaitable<void> HttpServer::run() {
  net::steady_timer backoff(ex_);
  for (;;) {
    boost::system::error_code ec;
    net::ip::tcp::socket socket(ex_);
    co_await acceptor_.async_accept(socket, net::redirect_error(net::use_awaitable, ec));
    if (stopping_) co_return;
    if (ec) {
      note_accept_problem("accept: " + ec.message());
      // Out of descriptors or memory, a pending connection stays pending and accept fails at
      // once again: wait for connections to end rather than spin.
      const int err = ec.category() == boost::system::system_category() ? ec.value() : 0;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        backoff.expires_after(kAcceptBackoff);
        co_await backoff.async_wait(net::redirect_error(net::use_awaitable, ec));
        if (stopping_) co_return;
      }
      continue;
    }
    if (!set_cloexec(socket.native_handle())) continue;  // closed with `socket`
    const auto peer = socket.remote_endpoint(ec).address();
    if (ec) continue;  // already gone
    std::optional<Error> over;
    if (counts_->total >= limits_.max_total) {
      over = api::errors::capacity(
          "the server has " + std::to_string(counts_->total) +
              " connections open, the most --max-connections allows: retry shortly",
          1);
    } else if (auto it = counts_->per_peer.find(peer);
               it != counts_->per_peer.end() && it->second >= limits_.max_per_peer) {
      over = api::errors::too_many_connections(
          peer.to_string() + " has " + std::to_string(it->second) +
          " connections open, the most --max-connections-per-peer allows: close some or retry "
          "shortly");
      over->retry_after_s = 1;
    }
    if (over) {
      note_accept_problem("refusing a connection from " + peer.to_string() + ": " + over->message);
      if (counts_->refusing < kMaxRefusing) {
        cabin::spawn(ex_, refuse(std::move(socket), error_response(*over)),
                     "refusing a connection over a cap");
      }
      continue;
    }
    Slot slot(counts_, peer);
    socket.set_option(net::ip::tcp::no_delay(true), ec);
    if (tls_) {
      cabin::spawn(ex_, accept_tls(std::move(socket), std::move(slot)),
                   "TLS handshake of a client connection");
    } else {
      cabin::spawn(
          ex_,
          serve(ClientStream(beast::tcp_stream(std::move(socket)), &connections_), std::move(slot)),
          "client connection");
    }
  }
}

net::awaitable<void> HttpServer::accept_tls(net::ip::tcp::socket socket, Slot slot) {
  auto tls = std::make_unique<ClientStream::Tls>(beast::tcp_stream(std::move(socket)), *tls_);
  tls->next_layer().expires_after(kTlsHandshakeTimeout);
  boost::system::error_code ec;
  co_await tls->async_handshake(net::ssl::stream_base::server,
                                net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    log()->debug("TLS handshake: {}", ec.message());
    co_return;
  }
  co_await serve(ClientStream(std::move(tls), &connections_), std::move(slot));
}

net::awaitable<void> HttpServer::refuse(net::ip::tcp::socket socket, Response answer) {
  struct Counted {
    std::shared_ptr<Counts> counts;
    explicit Counted(std::shared_ptr<Counts> c) : counts(std::move(c)) { ++counts->refusing; }
    ~Counted() { --counts->refusing; }
  } counted(counts_);
  answer.set(http::field::connection, "close");
  answer.keep_alive(false);
  boost::system::error_code ec;
  beast::tcp_stream tcp(std::move(socket));
  tcp.expires_after(kRefusalTimeout);
  // Closing with the request unread would reset the connection, and the client could lose the
  // answer with it: the request is read (and dropped) until the client closes or the deadline.
  auto linger = [](auto& stream, beast::tcp_stream& under) -> net::awaitable<void> {
    boost::system::error_code ec;
    under.socket().shutdown(net::socket_base::shutdown_send, ec);
    std::array<char, 4096> sink;
    while (!ec) {
      co_await stream.async_read_some(net::buffer(sink),
                                      net::redirect_error(net::use_awaitable, ec));
    }
  };
  if (tls_) {
    ClientStream::Tls tls(std::move(tcp), *tls_);
    co_await tls.async_handshake(net::ssl::stream_base::server,
                                 net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    co_await http::async_write(tls, answer, net::redirect_error(net::use_awaitable, ec));
    if (!ec) co_await linger(tls, tls.next_layer());
    co_return;
  }
  co_await http::async_write(tcp, answer, net::redirect_error(net::use_awaitable, ec));
  if (!ec) co_await linger(tcp, tcp);
}

void HttpServer::stop() {
  stopping_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  connections_.go_away_all();
}

net::awaitable<void> HttpServer::serve(ClientStream stream, [[maybe_unused]] Slot slot) {
  boost::system::error_code ec;
  beast::flat_buffer buffer;
  // Started once the first request has been answered.
  std::shared_ptr<IdleWatch> idle;
  struct EndWatch {
    std::shared_ptr<IdleWatch>& w;
    void operator()() const {
      if (!w) return;
      w->ended = true;
      w->timer.cancel();
    }
    ~EndWatch() { (*this)(); }
  } end_watch{idle};
  preview::ConnectionState preview_state;
  preview_state.before_take = [&] { end_watch(); };

  bool first = true;
  for (;;) {
    // The header first: preview requests stream their bodies, API requests read them whole.
    http::request_parser<http::empty_body> header;
    header.header_limit(kMaxHeaderBytes);
    // Previews stream bodies of any size; the API's limit is checked below. (Not boost::none:
    // Beast 1.74 compares a length with an empty optional as "over the limit".)
    header.body_limit((std::numeric_limits<std::uint64_t>::max)());
    if (first) {
      stream.tcp().expires_after(kFirstRequestTimeout);
      first = false;
    } else {
      if (!idle) {
        idle = std::make_shared<IdleWatch>(ex_);
        cabin::spawn(ex_, watch_idle(idle, &stream.socket()), "idle watch of a client connection");
      }
      idle->busy = false;
      ++idle->requests;
      stream.tcp().expires_never();
    }
    co_await http::async_read_header(stream, buffer, header,
                                     net::redirect_error(net::use_awaitable, ec));
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset ||
        ec == net::error::eof || ec == net::error::not_connected || stopping_) {
      break;
    }
    if (idle) idle->busy = true;
    if (!ec && previews_.claims(header.get())) {
      stream.tcp().expires_never();  // the proxy streams; revocation and expiry close it
      auto outcome = co_await previews_.serve(stream, buffer, header, preview_state);
      if (outcome == preview::Outcome::kTaken) co_return;
      if (outcome == preview::Outcome::kClose || stopping_) {
        co_await linger(stream);
        co_return;
      }
      continue;
    }
    // An upload streams its body into the sandbox: routed and authenticated on its header,
    // and its handler reads the body.
    if (!ec && header.get().method() == http::verb::put) {
      auto upload = api::route(header.get().method_string(), header.get().target());
      if (upload && upload->id == api::RouteId::kPutFile) {
        Request head(header.get().base());
        auto authed = api_.authenticate(*upload, head);
        if (!authed) {
          auto res = error_response(authed.error());
          res.keep_alive(false);
          stream.tcp().expires_after(kLingerTimeout);
          co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
          co_await linger(stream);
          co_return;
        }
        stream.tcp().expires_never();
        end_watch();
        co_await api_.handle_upgrade(*upload, *authed, std::move(head), std::move(stream),
                                     std::move(buffer));
        co_return;
      }
    }
    std::optional<http::request_parser<http::string_body>> parser;
    if (!ec && header.content_length().value_or(0) > kMaxBodyBytes) ec = http::error::body_limit;
    if (!ec) {
      parser.emplace(std::move(header));
      parser->body_limit(kMaxBodyBytes);
      stream.tcp().expires_after(kReadTimeout);
      co_await http::async_read(stream, buffer, *parser,
                                net::redirect_error(net::use_awaitable, ec));
    }
    if (ec) {
      auto res = parse_error_response(ec, buffer);
      res.keep_alive(false);
      stream.tcp().expires_after(kLingerTimeout);
      co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
      co_await linger(stream);
      co_return;
    }
    auto req = parser->release();
    auto route = api::route(req.method_string(), req.target());
    Response res;
    Result<Authn> authed = Authn{};
    if (!route) {
      res = error_response(route.error());
    } else if (authed = api_.authenticate(*route, req); !authed) {
      // A refused live view link is opened by a person: they get a page that says why.
      if (route->id == api::RouteId::kLivePage) {
        res = error_page(authed.error());
      } else {
        res = error_response(authed.error());
      }
    } else if (api::takes_connection(route->id)) {
      stream.tcp().expires_never();
      end_watch();
      co_await api_.handle_upgrade(*route, *authed, std::move(req), std::move(stream),
                                   std::move(buffer));
      co_return;
    } else {
      stream.tcp().expires_never();  // handlers bound their own waits (session start, exec timeout)
      // A create may wait long for room: it leaves the queue when its client leaves. Other
      // requests are not watched, which would cost a wait on the socket each.
      std::shared_ptr<ClientWatch> watch;
      if (route->id == api::RouteId::kCreateSession) {
        watch = std::make_shared<ClientWatch>();
        cabin::spawn(ex_, watch_client(stream.socket(), watch), "watch of a waiting client");
      }
      res = co_await api_.handle(*route, *authed, req, watch ? &watch->gone : nullptr);
      if (watch) {
        watch->answered = true;
        stream.socket().cancel(ec);
      }
    }
    bool keep = req.keep_alive() && !stopping_;
    res.keep_alive(keep);
    stream.tcp().expires_after(kReadTimeout);
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    if (ec || !keep) break;
  }
  stream.socket().shutdown(net::socket_base::shutdown_send, ec);
  stream.close(ec);
}

}  // namespace cabin::http_api
