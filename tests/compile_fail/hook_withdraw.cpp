// expect: its withdraw does not match the hook
#include "hooked_wait.hpp"
// withdraw returning nothing: the host could not await it, and the mark a
// failed acquire left would stay, silently.
struct Withdrawing : dlock::ownership::Token {
  template <class B>
  void withdraw(B&, dlock::ext::hold_record&) const;
};
static_assert(lock_named<Withdrawing, dlock::wait::Spin>);
