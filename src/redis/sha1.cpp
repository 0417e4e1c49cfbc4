// SHA-1 (FIPS 180-4), on its own: Redis names scripts by it (EVALSHA).
#include <dlock/redis/config.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace dlock::redis {

// SHA-1 (FIPS 180-4): Redis names scripts by it.
std::string sha1_hex(std::string_view text) {
  std::uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  auto rotl = [](std::uint32_t x, int n) { return (x << n) | (x >> (32 - n)); };
  auto block = [&](const unsigned char* p) {
    std::uint32_t w[80];
    for (int i = 0; i < 16; ++i)
      w[i] = std::uint32_t(p[4 * i]) << 24 | std::uint32_t(p[4 * i + 1]) << 16 |
             std::uint32_t(p[4 * i + 2]) << 8 | std::uint32_t(p[4 * i + 3]);
    for (int i = 16; i < 80; ++i) w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; ++i) {
      std::uint32_t f, k;
      if (i < 20) f = (b & c) | (~b & d), k = 0x5A827999;
      else if (i < 40) f = b ^ c ^ d, k = 0x6ED9EBA1;
      else if (i < 60) f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
      else f = b ^ c ^ d, k = 0xCA62C1D6;
      std::uint32_t t = rotl(a, 5) + f + e + k + w[i];
      e = d, d = c, c = rotl(b, 30), b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
  };
  const auto* data = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t n = text.size(), i = 0;
  for (; i + 64 <= n; i += 64) block(data + i);
  unsigned char tail[128] = {};
  std::size_t rest = n - i;
  std::memcpy(tail, data + i, rest);
  tail[rest] = 0x80;
  std::size_t total = rest + 1 + 8 <= 64 ? 64 : 128;
  std::uint64_t bits = static_cast<std::uint64_t>(n) * 8;
  for (int b = 0; b < 8; ++b) tail[total - 1 - b] = static_cast<unsigned char>(bits >> (8 * b));
  block(tail);
  if (total == 128) block(tail + 64);
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (auto word : h)
    for (int s = 28; s >= 0; s -= 4) out.push_back(digits[(word >> s) & 15]);
  return out;
}

}  // namespace dlock::redis
