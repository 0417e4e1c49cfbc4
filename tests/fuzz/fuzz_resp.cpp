// libFuzzer target for the RESP parser: any bytes, split in any way, must
// parse to the same replies (or the same error) as in one piece, within the
// limits, without crashing.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/redis/resp.hpp>

namespace {

struct run {
  std::vector<dlock::redis::value> replies;
  std::error_code ec;
};

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_resp: invariant broken: %s\n", what);
    std::abort();  // not assert(): it must hold in release builds too
  }
}

// The values inside `v`'s arrays, at any depth (as parser_limits counts).
std::size_t values_in(const dlock::redis::value& v) {
  std::size_t n = v.elements.size();
  for (auto& e : v.elements) n += values_in(e);
  return n;
}

// Feeds `input` in pieces whose sizes cycle through `sizes`.
run parse_all(std::string_view input, const std::vector<std::size_t>& sizes) {
  dlock::redis::parser_limits limits;
  limits.max_bulk_length = 4096;
  limits.max_elements = 256;
  limits.max_depth = 8;
  limits.max_line_length = 512;
  limits.max_reply_bytes = 16384;
  limits.max_reply_values = 1024;
  dlock::redis::parser p(limits);
  run out;
  std::string buffer;
  std::size_t pos = 0, turn = 0;
  for (;;) {
    std::size_t take = std::min(sizes[turn++ % sizes.size()], input.size() - pos);
    buffer.append(input.substr(pos, take));
    pos += take;
    for (;;) {
      std::size_t before = buffer.size();
      auto res = p.parse(buffer);
      check(res.consumed <= before, "consumed more than offered");
      buffer.erase(0, res.consumed);
      if (res.ec) {
        check(!res.reply, "a reply together with an error");
        out.ec = res.ec;
        return out;
      }
      if (!res.reply) break;
      check(res.consumed > 0, "a reply from no bytes");
      check(values_in(*res.reply) <= limits.max_reply_values, "a reply past the total of values");
      out.replies.push_back(std::move(*res.reply));
    }
    // Without an error, only an incomplete line may stay unconsumed.
    check(buffer.size() <= limits.max_line_length + 2, "unbounded buffering");
    if (pos == input.size()) return out;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte picks how to cut the rest.
  std::size_t cut = data[0];
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto whole = parse_all(input, {input.size() + 1});
  auto pieces = parse_all(input, {1 + cut % 7, 1 + cut % 13, 1});
  check(whole.ec == pieces.ec, "the error depends on how the input was cut");
  check(whole.replies == pieces.replies, "the replies depend on how the input was cut");
  return 0;
}
