// Runs a function when a scope ends, however it ends.
#pragma once

namespace dlock::detail {

template <class F>
struct on_exit {
  F f;
  ~on_exit() { f(); }
};
template <class F>
on_exit(F) -> on_exit<F>;

}  // namespace dlock::detail
