// vnc-forward's peer check: finding who owns the other end of a loopback TCP connection.
#include "server/vnc_forward.h"

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

namespace net = boost::asio;
using tcp = net::ip::tcp;
using cabin::tcp_socket_owner;

namespace {

std::string read_text(const char* path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

const char* kHeader =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
    "inode\n";

}  // namespace

TEST_CASE("tcp_socket_owner reads the uid of an established socket's line") {
  const tcp::endpoint client(net::ip::make_address("127.0.0.1"), 50000);  // C350
  const tcp::endpoint server(net::ip::make_address("127.0.0.1"), 5900);   // 170C
  std::string table = std::string(kHeader) +
      // the server's accepted socket, owned by uid 7
      "   0: 0100007F:170C 0100007F:C350 01 00000000:00000000 00:00000000 00000000     7        0 "
      "1 1 0000000000000000 20 4 30 10 -1\n"
      // the client's socket, in TIME_WAIT (uid 0) and then established (uid 1234)
      "   1: 0100007F:C350 0100007F:170C 06 00000000:00000000 03:00000000 00000000     0        0 "
      "0 3 0000000000000000\n"
      "   2: 0100007F:C350 0100007F:170C 01 00000000:00000000 00:00000000 00000000  1234        0 "
      "2 1 0000000000000000 20 4 30 10 -1\n";
  CHECK(tcp_socket_owner(table, client, server) == 1234u);
  CHECK(tcp_socket_owner(table, server, client) == 7u);
  const tcp::endpoint other(net::ip::make_address("127.0.0.1"), 50001);
  CHECK_FALSE(tcp_socket_owner(table, other, server).has_value());
  CHECK_FALSE(tcp_socket_owner(kHeader, client, server).has_value());

  // tcp6: a v4-mapped client of a v4 listener shows as ::ffff:127.0.0.1.
  std::string table6 = std::string(kHeader) +
      "   0: 0000000000000000FFFF00000100007F:C350 0000000000000000FFFF00000100007F:170C 01 "
      "00000000:00000000 00:00000000 00000000  4321        0 3 1 0000000000000000 20 4 30 10 -1\n";
  CHECK(tcp_socket_owner(table6, client, server) == 4321u);
}

TEST_CASE("tcp_socket_owner finds this process's own loopback connection") {
  net::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(net::ip::address_v4::loopback(), 0));
  tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  tcp::socket accepted(io);
  acceptor.accept(accepted);
  const auto owner = tcp_socket_owner(read_text("/proc/net/tcp"), accepted.remote_endpoint(),
                                      accepted.local_endpoint());
  REQUIRE(owner.has_value());
  CHECK(*owner == ::geteuid());
}
