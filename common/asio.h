// The first include of every file that uses Asio or Beast. Boost 1.74's awaitable.hpp uses
// std::exchange without including <utility>, so <utility> comes before any Asio header; `net`
// names Asio throughout the project.
#pragma once

// clang-format off
#include <utility>
// clang-format on

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

namespace cabin {
namespace net = boost::asio;
}  // namespace cabin
