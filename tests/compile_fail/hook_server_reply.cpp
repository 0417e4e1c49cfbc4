// expect: its waiter's server_reply does not match the hook
#include "hooked_wait.hpp"
// server_reply() that is not const: the lock could never call it, and the
// server's words would be lost without a word.
struct Hooks {
  std::string server_reply();
};
static_assert(lock_named<dlock::ownership::Token, HookedWait<Hooks>>);
