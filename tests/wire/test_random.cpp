// Owner tokens: the ChaCha20 generator against RFC 8439's test vector, the
// tokens' shape and uniqueness, and fresh tokens in a forked child.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include <dlock/detail/random.hpp>

namespace {

std::string hex(const unsigned char* p, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

}  // namespace

TEST_CASE("chacha20_block gives RFC 8439's test vector (section 2.3.2)") {
  std::array<std::uint32_t, 8> key{};
  for (std::uint32_t i = 0; i < 8; ++i)  // bytes 00 01 02 ... 1f, little-endian words
    key[i] = (4 * i) | (4 * i + 1) << 8 | (4 * i + 2) << 16 | (4 * i + 3) << 24;
  auto block = dlock::detail::chacha20_block(key, 1, {0x09000000, 0x4a000000, 0x00000000});
  CHECK(hex(block.data(), block.size()) ==
        "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
        "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e");
}

TEST_CASE("tokens are 128-bit hex strings, never repeated, across threads and refills") {
  std::set<std::string> seen;
  std::vector<std::string> other(2000);
  std::thread t([&] {
    for (auto& s : other) s = dlock::detail::random_hex(16);
  });
  for (int i = 0; i < 2000; ++i) {  // many refills of one thread's generator
    auto s = dlock::detail::random_hex(16);
    REQUIRE(s.size() == 32);
    REQUIRE(s.find_first_not_of("0123456789abcdef") == std::string::npos);
    REQUIRE(seen.insert(s).second);
  }
  t.join();
  for (auto& s : other) REQUIRE(seen.insert(s).second);
  // Every hex digit appears in every position over 4000 tokens: not a constant or a counter.
  for (std::size_t pos = 0; pos < 32; ++pos) {
    std::set<char> digits;
    for (auto& s : seen) digits.insert(s[pos]);
    CHECK(digits.size() == 16);
  }
  CHECK(dlock::detail::random_hex(100).size() == 200);  // longer than one block of output
}

TEST_CASE("a forked child draws tokens and ids of its own, not its parent's next ones") {
  // The parent has drawn before the fork, so its generator's state is
  // copied into the child: without a re-key both would draw the same.
  dlock::detail::random_hex(16);
  dlock::detail::unique_id();
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto s = dlock::detail::random_hex(16) + " " + dlock::detail::unique_id() + "\n";
    ssize_t n = ::write(fds[1], s.data(), s.size());
    ::_exit(n == static_cast<ssize_t>(s.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  auto mine = dlock::detail::random_hex(16) + " " + dlock::detail::unique_id();
  char buf[256];
  std::string child;
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) child.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(child.size() > 33);
  auto child_token = child.substr(0, 32), my_token = mine.substr(0, 32);
  auto child_prefix = child.substr(33, 32), my_prefix = mine.substr(33, 32);
  CHECK(child_token != my_token);
  CHECK(child_prefix != my_prefix);  // a unique_id's random part
}
