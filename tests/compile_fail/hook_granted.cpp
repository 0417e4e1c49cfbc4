// expect: its waiter's granted does not match the hook
#include "hooked_wait.hpp"
// granted taking the record by pointer: a grant would never be noticed.
struct Hooks {
  template <class O, class Rec>
  bool granted(const O&, Rec*);
};
static_assert(lock_named<dlock::ownership::Token, HookedWait<Hooks>>);
