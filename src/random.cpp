// Owner tokens and client ids from a per-thread ChaCha20 generator keyed by
// the OS, and process-unique thread numbers.
#include <dlock/detail/random.hpp>

#include <pthread.h>
#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>

namespace dlock::detail {

namespace {

// Bumped in a forked child (pthread_atfork): every thread's generator and
// the unique_id prefix were copied from the parent and must not be reused.
std::atomic<unsigned> fork_generation{0};

void note_fork() { fork_generation.fetch_add(1, std::memory_order_relaxed); }

unsigned current_generation() {
  static std::once_flag registered;
  std::call_once(registered, [] { ::pthread_atfork(nullptr, nullptr, note_fork); });
  return fork_generation.load(std::memory_order_relaxed);
}

constexpr std::uint32_t rotl(std::uint32_t v, int n) { return (v << n) | (v >> (32 - n)); }

void quarter_round(std::uint32_t& a, std::uint32_t& b, std::uint32_t& c, std::uint32_t& d) {
  a += b; d ^= a; d = rotl(d, 16);
  c += d; b ^= c; b = rotl(b, 12);
  a += b; d ^= a; d = rotl(d, 8);
  c += d; b ^= c; b = rotl(b, 7);
}

std::uint32_t load_le(const unsigned char* p) {
  return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24;
}

// One thread's generator: a key, and output not yet handed out.
class generator {
 public:
  void fill(unsigned char* out, std::size_t n) {
    if (generation_ != current_generation() || !keyed_) rekey();
    while (n > 0) {
      if (used_ == sizeof buffer_) refill();
      std::size_t take = std::min(n, sizeof buffer_ - used_);
      std::memcpy(out, buffer_ + used_, take);
      std::memset(buffer_ + used_, 0, take);  // handed out: not kept
      used_ += take;
      out += take;
      n -= take;
    }
  }

 private:
  void rekey() {
    unsigned char seed[32];
    os_random(seed, sizeof seed);
    for (int i = 0; i < 8; ++i) key_[static_cast<std::size_t>(i)] = load_le(seed + 4 * i);
    std::memset(seed, 0, sizeof seed);
    generation_ = current_generation();
    keyed_ = true;
    refill();
  }

  // Eight blocks: the first 32 bytes become the next key, the rest is output.
  void refill() {
    unsigned char stream[8 * 64];
    for (std::uint32_t b = 0; b < 8; ++b) {
      auto block = chacha20_block(key_, b, {0, 0, 0});
      std::memcpy(stream + 64 * b, block.data(), 64);
    }
    for (int i = 0; i < 8; ++i) key_[static_cast<std::size_t>(i)] = load_le(stream + 4 * i);
    std::memcpy(buffer_, stream + 32, sizeof buffer_);
    std::memset(stream, 0, sizeof stream);
    used_ = 0;
  }

  std::array<std::uint32_t, 8> key_{};
  unsigned char buffer_[8 * 64 - 32] = {};
  std::size_t used_ = sizeof buffer_;
  unsigned generation_ = 0;
  bool keyed_ = false;
};

std::string hex(const unsigned char* raw, std::size_t bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(bytes * 2, '0');
  for (std::size_t i = 0; i < bytes; ++i) {
    out[2 * i] = digits[raw[i] >> 4];
    out[2 * i + 1] = digits[raw[i] & 15];
  }
  return out;
}

}  // namespace

void os_random(unsigned char* out, std::size_t n) {
  std::size_t filled = 0;
  while (filled < n) {
    ssize_t got = ::getrandom(out + filled, n - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::system_category(), "getrandom");
    }
    filled += static_cast<std::size_t>(got);
  }
}

std::array<unsigned char, 64> chacha20_block(const std::array<std::uint32_t, 8>& key, std::uint32_t counter,
                                             const std::array<std::uint32_t, 3>& nonce) {
  std::uint32_t in[16] = {0x61707865, 0x3320646e, 0x79622d32, 0x6b206574};  // "expand 32-byte k"
  for (int i = 0; i < 8; ++i) in[4 + i] = key[static_cast<std::size_t>(i)];
  in[12] = counter;
  for (int i = 0; i < 3; ++i) in[13 + i] = nonce[static_cast<std::size_t>(i)];
  std::uint32_t x[16];
  std::memcpy(x, in, sizeof x);
  for (int round = 0; round < 10; ++round) {
    quarter_round(x[0], x[4], x[8], x[12]);
    quarter_round(x[1], x[5], x[9], x[13]);
    quarter_round(x[2], x[6], x[10], x[14]);
    quarter_round(x[3], x[7], x[11], x[15]);
    quarter_round(x[0], x[5], x[10], x[15]);
    quarter_round(x[1], x[6], x[11], x[12]);
    quarter_round(x[2], x[7], x[8], x[13]);
    quarter_round(x[3], x[4], x[9], x[14]);
  }
  std::array<unsigned char, 64> out;
  for (int i = 0; i < 16; ++i) {
    std::uint32_t v = x[i] + in[i];
    for (int k = 0; k < 4; ++k) out[static_cast<std::size_t>(4 * i + k)] = static_cast<unsigned char>(v >> (8 * k));
  }
  return out;
}

std::string random_hex(std::size_t bytes) {
  thread_local generator g;
  unsigned char raw[64];
  std::string out;
  while (bytes > 0) {
    std::size_t take = std::min(bytes, sizeof raw);
    g.fill(raw, take);
    out += hex(raw, take);
    bytes -= take;
  }
  std::memset(raw, 0, sizeof raw);
  return out;
}

std::string unique_id() {
  // 128 random bits per thread (again in a forked child), then a counter
  // shared by the process's threads.
  thread_local std::string prefix;
  thread_local unsigned generation = 0;
  static std::atomic<unsigned long long> counter{0};
  if (prefix.empty() || generation != current_generation()) {
    prefix = random_hex(16) + ":";
    generation = current_generation();
  }
  return prefix + std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
}

unsigned long long this_thread_number() noexcept {
  static std::atomic<unsigned long long> next{1};
  thread_local const unsigned long long mine = next.fetch_add(1);
  return mine;
}

}  // namespace dlock::detail
