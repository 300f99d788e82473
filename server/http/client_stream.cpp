#include "server/http/client_stream.h"

namespace cabin::http_api {

ClientStream::ClientStream(Plain s, ConnectionSet* set) : core_(std::make_unique<Core>()) {
  core_->plain.emplace(std::move(s));
  join(set);
}

ClientStream::ClientStream(std::unique_ptr<Tls> s, ConnectionSet* set)
    : core_(std::make_unique<Core>()) {
  core_->tls = std::move(s);
  join(set);
}

ClientStream::ClientStream(std::unique_ptr<Core> core) : core_(std::move(core)) {}

ClientStream::~ClientStream() = default;

std::function<void()> ClientStream::close_function(Core* core) {
  // Asio cancellation, on the connection's own executor: pending reads and writes end with
  // operation_aborted and the peer sees the connection end.
  return [core] {
    auto& tcp = core->tls ? core->tls->next_layer() : *core->plain;
    boost::system::error_code ec;
    tcp.cancel();
    tcp.socket().shutdown(net::socket_base::shutdown_both, ec);
  };
}

void ClientStream::join(ConnectionSet* set) {
  core_->set = set;
  if (set) core_->member = set->join(get_executor(), close_function(core_.get()));
}

ClientStream ClientStream::moved_to(const executor_type& ex) && {
  if (!movable()) return std::move(*this);
  boost::system::error_code ec;
  const auto local = core_->plain->socket().local_endpoint(ec);
  if (ec) return std::move(*this);  // already dead: nothing to carry
  net::ip::tcp::socket moved(ex);
  const int fd = core_->plain->release_socket().release(ec);
  if (ec) return std::move(*this);
  moved.assign(local.protocol(), fd, ec);
  if (ec) {
    boost::system::error_code ignored;
    core_->plain->socket().assign(local.protocol(), fd, ignored);  // stays where it was
    return std::move(*this);
  }
  // The same place in the set, so closers taken before the move still reach it.
  auto core = std::make_unique<Core>();
  core->plain.emplace(std::move(moved));
  core->set = core_->set;
  core->member = std::move(core_->member);
  core->member.rebind(ex, close_function(core.get()));
  core_.reset();
  ClientStream out(std::move(core));
  return out;
}

void ClientStream::start_read(BufferList<net::mutable_buffer> buffers, IoHandler handler) {
  if (core_->tls) {
    core_->tls->async_read_some(buffers, std::move(handler));
  } else {
    core_->plain->async_read_some(buffers, std::move(handler));
  }
}

void ClientStream::start_write(BufferList<net::const_buffer> buffers, IoHandler handler) {
  if (core_->tls) {
    core_->tls->async_write_some(buffers, std::move(handler));
  } else {
    core_->plain->async_write_some(buffers, std::move(handler));
  }
}

net::awaitable<void> refuse_connection(ClientStream& s, Response res) {
  res.keep_alive(false);
  boost::system::error_code ec;
  co_await http::async_write(s, res, net::redirect_error(net::use_awaitable, ec));
  s.shutdown(net::socket_base::shutdown_both, ec);
  s.close(ec);
}

}  // namespace cabin::http_api
