// expect: its waiter's leave does not match the hook
#include "hooked_wait.hpp"
// leave returning a plain bool: an acquire that gives up would never leave
// the line, and a grant that came first would be lost.
struct Hooks {
  template <class O, class Rec>
  bool leave(const O&, const std::shared_ptr<Rec>&, dlock::ext::background&);
};
static_assert(lock_named<dlock::ownership::Token, HookedWait<Hooks>>);
