// The host's view of a waiter: the two operations every waiter has
// (prepare, wait) and the optional hooks around each try, each with a
// default that does nothing, so that the host calls the same steps whatever
// wait and ownership it composes.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <dlock/detail/publishing.hpp>
#include <dlock/concepts.hpp>
#include <dlock/detail/background.hpp>

namespace dlock::detail {

/// One acquire operation's waiter for wait policy `W` on backend `B` with
/// ownership `O`. The hooks (see hooks.hpp) are called if the waiter has
/// them; one of a hook's name that does not match does not compile
/// (policy_checks), so a hook is never skipped silently:
/// - before_try(o, rec, deadline): before each try (HandOff: whether the
///   try joins the line);
/// - granted(o, rec): the lock was handed to this waiter, no try needed (it
///   has confirmed the lease);
/// - after_try(o, rec, attempt): a try's outcome (HandOff: a queued waiter's
///   entry is refreshed from now on);
/// - leave(o, rec, background): the acquire ends without the lock, inside
///   the owner's gate; true when the lock is held after all (a grant came
///   first). Work that must outlive the operation goes to `background`;
/// - done(): the acquire is over (also run by the destructor);
/// - server_reply(): after prepare() or wait() failed with server_error,
///   the server's words (a refused SUBSCRIBE).
template <class W, class B, class O>
class wait_steps {
 public:
  using waiter_type = typename W::template waiter<B>;
  using record = record_t<O>;

  wait_steps(const W& w, B& backend, const O& ownership, const std::string& name)
      : waiter_(w, backend, name, release_channel<O>(backend, name)), ownership_(ownership) {}
  ~wait_steps() { done(); }
  wait_steps(const wait_steps&) = delete;
  wait_steps& operator=(const wait_steps&) = delete;

  asio::awaitable<error_code> prepare() { return waiter_.prepare(); }

  asio::awaitable<error_code> wait(std::optional<milliseconds> held_for, steady::time_point deadline) {
    return waiter_.wait(held_for, deadline);
  }

  asio::awaitable<void> before_try(record& rec, steady::time_point deadline) {
    if constexpr (contract::waiter_before_try<W, B, O>) co_await waiter_.before_try(ownership_, rec, deadline);
  }

  bool granted(record& rec) {
    if constexpr (contract::waiter_granted<W, B, O>) return waiter_.granted(ownership_, rec);
    else return false;
  }

  void after_try(const std::shared_ptr<record>& rec, const attempt& at) {
    if constexpr (contract::waiter_after_try<W, B, O>) waiter_.after_try(ownership_, rec, at);
  }

  asio::awaitable<bool> leave(const std::shared_ptr<record>& rec, background_work& background) {
    if constexpr (contract::waiter_leave<W, B, O>) co_return co_await waiter_.leave(ownership_, rec, background);
    else co_return false;
  }

  void done() {
    if constexpr (contract::waiter_done<W, B>) waiter_.done();
  }

  std::string server_reply() const {
    if constexpr (contract::waiter_server_reply<W, B>) return std::string(waiter_.server_reply());
    else return {};
  }

 private:
  waiter_type waiter_;
  const O& ownership_;
};

}  // namespace dlock::detail
