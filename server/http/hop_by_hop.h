// The fields of an HTTP message that belong to one hop (RFC 9110 7.6.1), for the proxies that
// write a message on: the preview proxy and the egress proxy.
#pragma once

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/container/small_vector.hpp>
#include <initializer_list>
#include <string_view>

namespace cabin::http_api {

// Hop-by-hop by definition, or framing a proxy sets itself.
bool hop_by_hop(boost::beast::http::field f);

// The names a message's Connection headers (and any other listed here, such as the
// Proxy-Connection some clients send) declare hop-by-hop.
class ConnectionNamed {
 public:
  explicit ConnectionNamed(const boost::beast::http::fields& f,
                           std::initializer_list<boost::beast::http::field> lists = {
                               boost::beast::http::field::connection});
  bool contains(std::string_view name) const;

 private:
  boost::container::small_vector<std::string_view, 4> names_;
};

}  // namespace cabin::http_api
