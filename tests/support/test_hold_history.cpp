// The hold-history checker on its own: it must find every overlap of two
// holds of one lock, and nothing else. No Redis needed.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include <support/hold_history.hpp>

using dlock::test::hold_history;
using dlock::test::hold_span;

namespace {
hold_span span(std::string lock, std::string worker, std::int64_t start, std::int64_t end) {
  return hold_span{std::move(lock), std::move(worker), start, end};
}
}  // namespace

TEST_CASE("holds one after another do not overlap, even end to end", "[history]") {
  hold_history h;
  h.add(span("a", "w1", 100, 200));
  h.add(span("a", "w2", 200, 300));  // begins as the first ends
  h.add(span("a", "w1", 350, 400));
  CHECK(h.overlaps().empty());
}

TEST_CASE("a hold that begins before the previous one ends is an overlap", "[history]") {
  hold_history h;
  h.add(span("a", "w2", 150, 250));  // out of order on purpose
  h.add(span("a", "w1", 100, 200));
  auto o = h.overlaps();
  REQUIRE(o.size() == 1);
  CHECK(o[0].earlier.worker == "w1");
  CHECK(o[0].later.worker == "w2");
  CHECK(o[0].overlap_ns() == 50);
}

TEST_CASE("a hold inside a long one is found, and so is the next inside it", "[history]") {
  hold_history h;
  h.add(span("a", "long", 0, 1000));
  h.add(span("a", "x", 100, 200));
  h.add(span("a", "y", 300, 400));  // overlaps "long", not "x"
  h.add(span("a", "z", 1000, 1100));
  auto o = h.overlaps();
  REQUIRE(o.size() == 2);
  CHECK(o[0].earlier.worker == "long");
  CHECK(o[1].earlier.worker == "long");
  CHECK(o[1].later.worker == "y");
  CHECK(o[1].overlap_ns() == 100);
}

TEST_CASE("different locks are checked apart", "[history]") {
  hold_history h;
  h.add(span("a", "w1", 100, 200));
  h.add(span("b", "w2", 150, 250));
  CHECK(h.overlaps().empty());
  h.add(span("b", "w3", 240, 260));
  CHECK(h.overlaps().size() == 1);
}

TEST_CASE("spans round-trip through the line format; other lines are ignored", "[history]") {
  auto s = span("lock:x", "proc3.t1", 12345, 67890);
  auto back = hold_span::parse(s.format());
  REQUIRE(back);
  CHECK(back->lock == "lock:x");
  CHECK(back->worker == "proc3.t1");
  CHECK(back->start_ns == 12345);
  CHECK(back->end_ns == 67890);

  for (const char* bad : {"", "hold", "hold a b 1", "hold a b 1 2 3", "hold a b x 2", "hold a b 5 4", "done",
                          "hold a b 1 2x", "acquired"})
    CHECK_FALSE(hold_span::parse(bad));

  hold_history h;
  CHECK(h.add_lines("ready\nhold a w1 1 5\nhold a w2 4 9\r\nhold a w3 9 1\ndone\n") == 2);
  CHECK(h.size() == 2);
  CHECK(h.overlaps().size() == 1);
}

TEST_CASE("CLOCK_MONOTONIC stamps from many threads go into one history", "[history]") {
  hold_history h;
  std::atomic<int> backwards{0};  // Catch2's assertions are not thread-safe: count, check after
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        auto a = dlock::test::monotonic_ns();
        auto b = dlock::test::monotonic_ns();
        if (b < a) ++backwards;
        h.add(span("lock" + std::to_string(t), "w", a, b));  // one lock per thread: no overlaps
      }
    });
  for (auto& t : ts) t.join();
  CHECK(backwards == 0);
  CHECK(h.size() == 400);
  CHECK(h.overlaps().empty());
}
