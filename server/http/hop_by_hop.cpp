#include "server/http/hop_by_hop.h"

#include <boost/beast/http/rfc7230.hpp>

#include "common/ascii.h"

namespace cabin::http_api {

namespace http = boost::beast::http;
using Field = http::field;

bool hop_by_hop(Field f) {
  switch (f) {
    case Field::connection:
    case Field::keep_alive:
    case Field::proxy_connection:
    case Field::proxy_authorization:
    case Field::proxy_authenticate:
    case Field::te:
    case Field::trailer:
    case Field::transfer_encoding:
    case Field::content_length:
    case Field::upgrade:
      return true;
    default:
      return false;
  }
}

ConnectionNamed::ConnectionNamed(const http::fields& f, std::initializer_list<Field> lists) {
  for (Field list : lists) {
    for (auto it = f.find(list); it != f.end() && it->name() == list; ++it) {
      for (auto token : http::token_list{it->value()})
        names_.emplace_back(token.data(), token.size());
    }
  }
}

bool ConnectionNamed::contains(std::string_view name) const {
  for (auto n : names_) {
    if (iequals(n, name)) return true;
  }
  return false;
}

}  // namespace cabin::http_api
