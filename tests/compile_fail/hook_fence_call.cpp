// expect: its fence_call does not match the hook
#include "hooked_wait.hpp"
// fence_call taking the name, not the hold: fencing tokens would never be
// taken for a hold that won without one.
struct Fenced : dlock::ownership::Token {
  dlock::script_call fence_call(const std::string& name) const;
};
static_assert(lock_named<Fenced, dlock::wait::Spin>);
