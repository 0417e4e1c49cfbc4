// How a backend's blocking forms wait for an asynchronous operation, and
// turn its outcome into a value or an exception.
#pragma once

#include <future>
#include <system_error>
#include <type_traits>
#include <utility>

#include <dlock/error.hpp>
#include <dlock/redis/error_code.hpp>
#include <dlock/redis/resp.hpp>

namespace dlock::redis::detail {

/// Waits for an operation started by `start(callback)`; the callback
/// receives (error_code, T).
template <class T, class Start>
std::pair<std::error_code, T> wait_for(Start&& start) {
  std::promise<std::pair<std::error_code, T>> done;
  auto result = done.get_future();
  start([&done](error_code ec, T v) { done.set_value({ec, std::move(v)}); });
  return result.get();
}

/// The value, or a std::system_error: with the server's text for a
/// server_error, else with `what`.
template <class T>
T value_or_throw(std::pair<std::error_code, T> r, const char* what) {
  if (!r.first) return std::move(r.second);
  if constexpr (std::is_same_v<T, value>) {
    if (r.first == error::server_error) throw std::system_error(r.first, r.second.str);
  }
  throw std::system_error(r.first, what);
}

}  // namespace dlock::redis::detail
