// expect: its extend_batch does not match the hook
#include "hooked_wait.hpp"
// extend_batch taking the calls by value: the watchdog could not find it,
// and would renew each hold with its own call, silently.
struct Batcher : dlock::ownership::Token {
  static dlock::script_call extend_batch(std::vector<dlock::script_call>);
};
static_assert(lock_named<Batcher, dlock::wait::Spin>);
