// Deadlines of lock calls, on the steady clock.
#pragma once

#include <chrono>

#include <dlock/detail/hold_record.hpp>

namespace dlock::detail {

/// Now + d, saturated: try_lock_for(hours::max()) means "no deadline", and
/// a zero or negative duration means "now" (one try).
template <class Rep, class Period>
steady::time_point deadline_after(const std::chrono::duration<Rep, Period>& d) {
  auto now = steady::now();
  if (d <= d.zero()) return now;
  using fsec = std::chrono::duration<double>;
  if (std::chrono::duration_cast<fsec>(d) >= std::chrono::duration_cast<fsec>(steady::time_point::max() - now))
    return steady::time_point::max();
  return now + std::chrono::ceil<steady::duration>(d);
}

}  // namespace dlock::detail
