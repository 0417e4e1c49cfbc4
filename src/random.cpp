// OS randomness for owner tokens and client ids, and process-unique thread numbers.
#include <dlock/detail/random.hpp>

#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <system_error>
#include <vector>

namespace dlock::detail {

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  std::size_t filled = 0;
  while (filled < bytes) {
    ssize_t n = ::getrandom(raw.data() + filled, bytes - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::system_category(), "getrandom");
    }
    filled += static_cast<std::size_t>(n);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(bytes * 2, '0');
  for (std::size_t i = 0; i < bytes; ++i) {
    out[2 * i] = digits[raw[i] >> 4];
    out[2 * i + 1] = digits[raw[i] & 15];
  }
  return out;
}

std::string unique_id() {
  static const std::string prefix = random_hex(16) + ":";
  static std::atomic<unsigned long long> counter{0};
  return prefix + std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
}

unsigned long long this_thread_number() noexcept {
  static std::atomic<unsigned long long> next{1};
  thread_local const unsigned long long mine = next.fetch_add(1);
  return mine;
}

}  // namespace dlock::detail
