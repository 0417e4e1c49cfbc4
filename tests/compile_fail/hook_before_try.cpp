// expect: its waiter's before_try does not match the hook
#include "hooked_wait.hpp"
// before_try without the deadline: a hand-off waiter written this way would
// never join the line.
struct Hooks {
  template <class O, class Rec>
  boost::asio::awaitable<void> before_try(const O&, Rec&);
};
static_assert(lock_named<dlock::ownership::Token, HookedWait<Hooks>>);
