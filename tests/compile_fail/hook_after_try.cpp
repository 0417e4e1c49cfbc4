// expect: its waiter's after_try does not match the hook
#include "hooked_wait.hpp"
// after_try without the attempt: what a try found would never reach it.
struct Hooks {
  template <class O, class Rec>
  void after_try(const O&, const std::shared_ptr<Rec>&);
};
static_assert(lock_named<dlock::ownership::Token, HookedWait<Hooks>>);
