// The error type of every asynchronous completion in dlock, on its own so
// that the contracts can name it without the connection.
#pragma once

#include <boost/system/error_code.hpp>

namespace boost::asio {}

namespace dlock::redis {

namespace asio = boost::asio;

/// The error type of every asynchronous completion in dlock. It is Asio's
/// (so `use_awaitable` throws and `use_future` fails on it), converts to
/// std::error_code, and compares equal to dlock::error values.
using error_code = boost::system::error_code;

}  // namespace dlock::redis
