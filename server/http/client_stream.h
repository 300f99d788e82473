// ClientStream: one accepted client connection, plain TCP or TLS, behind a single type so the
// server, the bridges and the preview proxy are written once for both.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <array>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <memory>
#include <optional>

#include "server/http/connection_set.h"
#include "server/http/responses.h"

namespace cabin::http_api {

namespace net = boost::asio;
namespace beast = boost::beast;

class ClientStream {
 public:
  using executor_type = net::any_io_executor;
  using Plain = beast::tcp_stream;
  using Tls = beast::ssl_stream<beast::tcp_stream>;

  // `set`: the connection joins it for its whole life, whoever holds it (null: a stream of
  // cabind's own, as vnc-forward's).
  explicit ClientStream(Plain s, ConnectionSet* set = nullptr);
  // The handshake has been done.
  explicit ClientStream(std::unique_ptr<Tls> s, ConnectionSet* set = nullptr);
  ClientStream(ClientStream&&) noexcept = default;
  ClientStream& operator=(ClientStream&&) noexcept = default;
  ~ClientStream();

  executor_type get_executor() { return tcp().get_executor(); }
  bool is_tls() const { return core_->tls != nullptr; }

  // The TCP layer: timeouts (expires_after/never apply to TLS records too) and the socket.
  beast::tcp_stream& tcp() { return core_->tls ? core_->tls->next_layer() : *core_->plain; }
  net::ip::tcp::socket& socket() { return tcp().socket(); }

  // Whether moved_to() can carry the connection to another executor: plain TCP can, a TLS
  // session cannot (its state is bound to the stream it was made on).
  bool movable() const { return !is_tls(); }
  // The same connection, run by `ex` from now on (a pump thread); it stays in its set. No
  // operation may be pending and no timeout set.
  ClientStream moved_to(const executor_type& ex) &&;
  // Closes the connection from the control executor, wherever it runs by then; a no-op once it
  // ended (or for a stream in no set).
  std::function<void()> closer() const { return core_->member.closer(); }
  // How the connection leaves when cabind shuts down, if not by being closed (a WebSocket's close
  // frame); set on its executor once it runs where it will stay.
  void on_going_away(std::function<void()> f) { core_->member.on_going_away(std::move(f)); }

  // Reads and writes go through one type-erased path (client_stream.cpp), so that the TLS and
  // TCP layers below are compiled once rather than once per operation that runs over them.
  // Read_some and write_some may move fewer bytes than asked: a longer buffer sequence is cut to
  // its first kMaxBuffers.
  template <typename MutableBufferSequence, typename Token>
  auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
    return net::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBufferSequence& b) {
          start_read(BufferList<net::mutable_buffer>(b),
                     IoHandler(std::move(handler), get_executor()));
        },
        token, buffers);
  }

  template <typename ConstBufferSequence, typename Token>
  auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
    return net::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBufferSequence& b) {
          start_write(BufferList<net::const_buffer>(b),
                      IoHandler(std::move(handler), get_executor()));
        },
        token, buffers);
  }

  // For the byte pump. Half-closing a TLS stream shuts the TCP side down without a close_notify:
  // the tunnelled protocol (WebSocket, HTTP framing) already delimits its end.
  void shutdown(net::socket_base::shutdown_type what, boost::system::error_code& ec) {
    socket().shutdown(what, ec);
  }
  void close(boost::system::error_code& ec) { socket().close(ec); }

 private:
  static constexpr size_t kMaxBuffers = 16;

  // The first kMaxBuffers buffers of a sequence, as a sequence.
  template <typename Buffer>
  class BufferList {
   public:
    template <typename Sequence>
    explicit BufferList(const Sequence& s) {
      for (auto it = net::buffer_sequence_begin(s), end = net::buffer_sequence_end(s);
           it != end && count_ < kMaxBuffers; ++it) {
        items_[count_++] = Buffer(*it);
      }
    }
    const Buffer* begin() const { return items_.data(); }
    const Buffer* end() const { return items_.data() + count_; }

   private:
    std::array<Buffer, kMaxBuffers> items_{};
    size_t count_ = 0;
  };

  // A move-only completion handler of void(error_code, size_t), with its associated executor so
  // that the layers below complete on the executor the caller expects.
  class IoHandler {
   public:
    using executor_type = net::any_io_executor;
    template <typename Handler>
    IoHandler(Handler h, const executor_type& io_ex)
        : ex_(net::get_associated_executor(h, io_ex)),
          impl_(std::make_unique<Impl<Handler>>(std::move(h))) {}
    executor_type get_executor() const noexcept { return ex_; }
    void operator()(boost::system::error_code ec, std::size_t n) {
      auto impl = std::move(impl_);
      impl->call(std::move(impl), ec, n);
    }

   private:
    struct Base {
      virtual ~Base() = default;
      virtual void call(std::unique_ptr<Base> self, boost::system::error_code ec,
                        std::size_t n) = 0;
    };
    template <typename Handler>
    struct Impl final : Base {
      explicit Impl(Handler h) : handler(std::move(h)) {}
      void call(std::unique_ptr<Base> self, boost::system::error_code ec, std::size_t n) override {
        Handler h(std::move(handler));
        self.reset();  // free the storage before the upcall, which may start the next operation
        h(ec, n);
      }
      Handler handler;
    };
    executor_type ex_;
    std::unique_ptr<Base> impl_;
  };

  void start_read(BufferList<net::mutable_buffer> buffers, IoHandler handler);
  void start_write(BufferList<net::const_buffer> buffers, IoHandler handler);

  // On the heap, so that the set's closer can reach it however often the stream is moved.
  struct Core {
    std::optional<Plain> plain;
    std::unique_ptr<Tls> tls;
    ConnectionSet* set = nullptr;
    ConnectionSet::Member member;  // declared last: leaves before the socket goes
  };
  explicit ClientStream(std::unique_ptr<Core> core);
  void join(ConnectionSet* set);
  // How the set closes this connection: on its executor, by Asio cancellation.
  static std::function<void()> close_function(Core* core);

  std::unique_ptr<Core> core_;
};

// Answers `res` on a connection a handler took over, then closes it: how such handlers refuse.
net::awaitable<void> refuse_connection(ClientStream& s, Response res);

// Beast's timeouts close the lowest layer through this (found by ADL).
inline void beast_close_socket(ClientStream& s) {
  boost::system::error_code ec;
  s.close(ec);
}

// WebSocket streams over a ClientStream end it through these (Beast finds them by ADL). The
// WebSocket close handshake has already happened; TLS ends without a close_notify, as above.
inline void teardown(beast::role_type, ClientStream& s, boost::system::error_code& ec) {
  s.shutdown(net::socket_base::shutdown_both, ec);
  s.close(ec);
}

template <typename TeardownHandler>
void async_teardown(beast::role_type, ClientStream& s, TeardownHandler&& handler) {
  boost::system::error_code ec;
  s.shutdown(net::socket_base::shutdown_both, ec);
  s.close(ec);
  net::post(s.get_executor(),
            [h = std::forward<TeardownHandler>(handler), ec]() mutable { h(ec); });
}

}  // namespace cabin::http_api
