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

TEST_CASE("shared holds may overlap each other, never an exclusive one", "[history]") {
  auto shared = [](std::string worker, std::int64_t start, std::int64_t end) {
    auto s = span("rw", std::move(worker), start, end);
    s.shared = true;
    return s;
  };
  hold_history h;
  h.add(shared("r1", 100, 300));
  h.add(shared("r2", 150, 250));
  h.add(shared("r3", 200, 400));
  h.add(span("rw", "w1", 400, 500));  // the writer after the last reader
  h.add(shared("r4", 500, 600));
  CHECK(h.overlaps().empty());
  CHECK(h.most_at_once("rw") == 3);

  h.add(span("rw", "w2", 350, 450));  // a writer while r3 reads, and into w1
  h.add(shared("r5", 590, 700));      // a reader inside w3 (below)
  h.add(span("rw", "w3", 580, 620));  // a writer while r4 reads
  auto o = h.overlaps();
  REQUIRE(o.size() == 4);
  CHECK(o[0].earlier.worker == "r3");
  CHECK(o[0].later.worker == "w2");
  CHECK(o[1].earlier.worker == "w2");  // the exclusive one that ends last
  CHECK(o[1].later.worker == "w1");
  CHECK(o[2].earlier.worker == "r4");
  CHECK(o[2].later.worker == "w3");
  CHECK(o[3].earlier.worker == "w3");  // a reader against the writer, not against r4
  CHECK(o[3].later.worker == "r5");
  CHECK(o[3].overlap_ns() == 30);
}

TEST_CASE("the shared mark round-trips through the line format", "[history]") {
  auto s = span("rw", "p1.t2", 10, 20);
  s.shared = true;
  CHECK(s.format() == "hold rw p1.t2 10 20 shared");
  auto back = hold_span::parse(s.format());
  REQUIRE(back);
  CHECK(back->shared);
  CHECK_FALSE(hold_span::parse("hold rw p1.t2 10 20")->shared);
  CHECK_FALSE(hold_span::parse("hold rw p1.t2 10 20 exclusive"));
  CHECK_FALSE(hold_span::parse("hold rw p1.t2 10 20 shared x"));
}

TEST_CASE("most holds at once: ends before starts at one moment, holds of no length count", "[history]") {
  hold_history h;
  CHECK(h.most_at_once("a") == 0);
  h.add(span("a", "w1", 100, 200));
  h.add(span("a", "w2", 200, 300));  // end to end: one at a time
  h.add(span("b", "w3", 150, 250));  // another lock
  CHECK(h.most_at_once("a") == 1);
  h.add(span("a", "w4", 200, 200));  // no length, at the hand-over
  CHECK(h.most_at_once("a") == 2);
  h.add(span("a", "w5", 250, 260));
  CHECK(h.most_at_once("a") == 2);
}
