#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>

#include "server/auth/token_connections.h"

using cabin::auth::TokenConnections;

TEST_CASE("token connections close by session, by tag and by deadline, once each") {
  boost::asio::io_context ioc;
  auto conns = std::make_unique<TokenConnections>(ioc.get_executor());
  int a = 0, b = 0, c = 0, d = 0;
  auto ra = conns->add({"s1", "", std::nullopt}, [&] { ++a; });
  auto rb = conns->add({"s1", "prv_x", std::nullopt}, [&] { ++b; });
  auto rc = conns->add({"s2", "prv_x", std::nullopt}, [&] { ++c; });
  auto rd = conns->add({"s2", "", std::chrono::milliseconds(20)}, [&] { ++d; });
  CHECK(conns->count("s1") == 2);

  CHECK(conns->close_tag("s1", "prv_x") == 1);
  CHECK(b == 1);
  CHECK(c == 0);
  CHECK(conns->close_session("s1") == 1);
  CHECK(a == 1);
  CHECK(conns->close_session("s1") == 0);
  CHECK(a == 1);

  ioc.run_for(std::chrono::seconds(2));
  CHECK(d == 1);
  CHECK(c == 0);
  CHECK(conns->count("s2") == 1);

  // A connection that ended by itself is gone from the registry and is never closed later.
  rc.reset();
  CHECK(conns->count("s2") == 0);
  CHECK(conns->close_session("s2") == 0);
  CHECK(c == 0);

  // Registrations may outlive the registry.
  auto late = conns->add({"s3", "", std::chrono::hours(1)}, [] {});
  conns.reset();
  late.reset();
}

TEST_CASE("a closer may end its own registration while the registry is closing") {
  boost::asio::io_context ioc;
  TokenConnections conns(ioc.get_executor());
  TokenConnections::Registration r1, r2;
  int closed = 0;
  r1 = conns.add({"s", "", std::nullopt}, [&] { ++closed; r1.reset(); r2.reset(); });
  r2 = conns.add({"s", "", std::nullopt}, [&] { ++closed; });
  CHECK(conns.close_session("s") == 2);
  CHECK(closed == 2);
}
