// expect: its waiter's done does not match the hook
#include "hooked_wait.hpp"
// done taking an argument the host does not have: the waiter would never
// hear that the acquire is over.
struct Hooks {
  void done(bool won);
};
static_assert(lock_named<dlock::ownership::Token, HookedWait<Hooks>>);
