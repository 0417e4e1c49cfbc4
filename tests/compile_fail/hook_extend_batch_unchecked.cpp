// expect: has extend_batch but is not owner_checked
#include "hooked_wait.hpp"
// A batch renewal on an ownership that cannot check its owner: nothing
// renews its keys, so the hook would never run.
struct Unchecked : dlock::ownership::SetNx {
  static dlock::script_call extend_batch(const std::vector<const dlock::script_call*>&);
};
static_assert(lock_named<Unchecked, dlock::wait::Spin>);
