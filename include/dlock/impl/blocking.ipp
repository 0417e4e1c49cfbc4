// The bodies of Lock's blocking glue: the std and handle interfaces, how
// they run the acquire and release operations for a caller that waits (on
// the calling thread, see detail::run_here), and where a destroyed hold's
// release goes. Included at the bottom of lock.hpp; not a header to include
// on its own.
#pragma once

namespace dlock {

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::acquire_blocking(const std::string& key, detail::steady::time_point deadline)
    -> acquire_result {
  check_blocking_allowed();
  return run_blocking(acquire_op(key, deadline));
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
template <class T>
T Lock<BackendT, OwnershipT, RenewalT, WaitT>::run_blocking(asio::awaitable<T> op) {
  if constexpr (contract::backend_blocking<BackendT>) {
    // On this thread, with its commands on a connection of its own: no
    // thread hop before a command is written or after its reply is read.
    if (!detail::running_here()) {
      typename BackendT::blocking_scope scope(backend_);
      return detail::run_here(std::move(op));
    }
  }
  return asio::co_spawn(asio::make_strand(backend_.get_executor()), std::move(op), asio::use_future).get();
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::acquire_hold_blocking(detail::steady::time_point deadline, std::error_code& ec,
                                                                    std::string* server_reply, bool shared)
    -> std::optional<hold_type> {
  auto owner = shared ? std::string(detail::shared_key_prefix) + thread_owner() : thread_owner();
  auto r = acquire_blocking(owner, deadline);
  ec = r.ec;
  if (server_reply) *server_reply = std::move(r.server_reply);
  if (ec) return std::nullopt;
  return hold_type(this, std::move(owner), false, std::move(r.rec));
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::release_blocking(const std::string& key, std::shared_ptr<detail::hold_record> rec,
                                                 std::string id, bool abandon) -> release_result {
  if (backend_.on_io_thread()) return release_result{error::would_deadlock, std::move(id), {}};
  return run_blocking(release_op(key, std::move(rec), std::move(id), abandon));
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
void Lock<BackendT, OwnershipT, RenewalT, WaitT>::release_abandoned(std::string key, bool async,
                                                             std::shared_ptr<detail::hold_record> rec,
                                                             std::string id) noexcept {
  try {
    if (async || backend_.on_io_thread()) {
      auto task = [](Lock* self, std::string key, std::shared_ptr<detail::hold_record> rec,
                     std::string id) -> asio::awaitable<void> {
        auto r = co_await self->release_op(std::move(key), std::move(rec), std::move(id), true);
        if (r.ec) self->report(r.ec, "release in ~Hold", r.server_reply);
      };
      background_.spawn(backend_.get_executor(), task(this, std::move(key), std::move(rec), std::move(id)),
                        "release in ~Hold");
      return;
    }
    auto r = release_blocking(key, std::move(rec), std::move(id), true);
    if (r.ec) report(r.ec, "release in ~Hold", r.server_reply);
  } catch (...) {
    report(make_error_code(error::unexpected_exception),
           "release in ~Hold: " + detail::background_work::describe(std::current_exception()));
  }
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
void Lock<BackendT, OwnershipT, RenewalT, WaitT>::check_blocking_allowed() const {
  if (backend_.on_io_thread())
    throw std::logic_error("dlock: a blocking lock call on a thread that runs the backend's executor would deadlock; use the async interface there");
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
void Lock<BackendT, OwnershipT, RenewalT, WaitT>::lock() {
  auto r = acquire_blocking(thread_owner(), detail::steady::time_point::max());
  if (r.ec) throw std::system_error(r.ec, describe("lock", r.server_reply));
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
void Lock<BackendT, OwnershipT, RenewalT, WaitT>::unlock() noexcept {
  try {
    auto r = release_blocking(thread_owner(), nullptr, {}, false);
    if (r.ec) report(r.ec, "unlock", r.server_reply);
  } catch (...) {
    std::string what = "unlock";  // fits without allocating
    try {
      what += ": " + detail::background_work::describe(std::current_exception());
    } catch (...) {  // out of memory: reported without the description
    }
    report(make_error_code(error::unexpected_exception), what);
  }
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::acquire() -> hold_type {
  std::error_code ec;
  std::string server_reply;
  auto h = acquire_hold_blocking(detail::steady::time_point::max(), ec, &server_reply);
  if (ec) throw std::system_error(ec, describe("acquire", server_reply));
  return std::move(*h);
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::try_acquire_until_steady(detail::steady::time_point deadline)
    -> std::optional<hold_type> {
  std::error_code ec;
  std::string server_reply;
  auto h = acquire_hold_blocking(deadline, ec, &server_reply);
  if (ec == error::not_acquired) return std::nullopt;
  if (ec) throw std::system_error(ec, describe("acquire", server_reply));
  return h;
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
bool Lock<BackendT, OwnershipT, RenewalT, WaitT>::try_lock_until_steady(detail::steady::time_point deadline) {
  auto r = acquire_blocking(thread_owner(), deadline);
  if (r.ec == error::not_acquired) return false;
  if (r.ec) throw std::system_error(r.ec, describe("try_lock", r.server_reply));
  return true;
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
bool Lock<BackendT, OwnershipT, RenewalT, WaitT>::shared_lock_until(detail::steady::time_point deadline, const char* what) {
  auto r = acquire_blocking(std::string(detail::shared_key_prefix) + thread_owner(), deadline);
  if (r.ec == error::not_acquired && deadline != detail::steady::time_point::max()) return false;
  if (r.ec) throw std::system_error(r.ec, describe(what, r.server_reply));
  return true;
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
void Lock<BackendT, OwnershipT, RenewalT, WaitT>::shared_unlock() noexcept {
  try {
    auto r = release_blocking(std::string(detail::shared_key_prefix) + thread_owner(), nullptr, {}, false);
    if (r.ec) report(r.ec, "unlock_shared", r.server_reply);
  } catch (...) {
    report(make_error_code(error::unexpected_exception), "unlock_shared");
  }
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
std::error_code Lock<BackendT, OwnershipT, RenewalT, WaitT>::shared_unlock_code() {
  return release_blocking(std::string(detail::shared_key_prefix) + thread_owner(), nullptr, {}, false).ec;
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
auto Lock<BackendT, OwnershipT, RenewalT, WaitT>::shared_acquire_until(detail::steady::time_point deadline, bool must)
    -> std::optional<hold_type> {
  std::error_code ec;
  std::string server_reply;
  auto h = acquire_hold_blocking(deadline, ec, &server_reply, true);
  if (ec == error::not_acquired && !must) return std::nullopt;
  if (ec) throw std::system_error(ec, describe("acquire_shared", server_reply));
  return h;
}

template <class BackendT, class OwnershipT, class RenewalT, class WaitT>
error_code Lock<BackendT, OwnershipT, RenewalT, WaitT>::release_hold_blocking(hold_type& hold, std::string* server_reply) {
  auto r = release_blocking(hold.owner_key_, hold.record_, hold.release_id_, false);
  conclude_release(hold, r.ec, std::move(r.retry_id));
  if (server_reply) *server_reply = std::move(r.server_reply);
  return r.ec;
}

}  // namespace dlock
