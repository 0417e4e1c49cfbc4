// An LD_PRELOAD library for the test harness: the process's wall clock
// (CLOCK_REALTIME, gettimeofday, time) runs DLOCK_CLOCK_SKEW_MS
// milliseconds ahead (or behind, when negative), plus, when
// DLOCK_CLOCK_STEP_FILE names a file of at least 8 bytes, the 64-bit
// count of milliseconds at its start, read at every call: a test steps
// the clock of a running server by writing it. The monotonic clocks are
// left alone. It does what Debian's faketime would, which redis-server 7.0
// does not survive (libfaketime 0.9.10 aborts it at start with "recursive
// calls to clock_gettime"): it resolves nothing at run time, so nothing it
// calls can call back into it. Every call is a system call (no vDSO).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>

namespace {

long long skew_ns() {
  static const long long ns = [] {
    const char* text = std::getenv("DLOCK_CLOCK_SKEW_MS");
    return text ? std::atoll(text) * 1000000LL : 0LL;
  }();
  return ns;
}

// The step file, mapped once (read-only, shared: the test's writes show
// at once); null when there is none.
const volatile long long* step_ms() {
  static const volatile long long* at = []() -> const volatile long long* {
    const char* path = std::getenv("DLOCK_CLOCK_STEP_FILE");
    if (!path) return nullptr;
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    void* p = ::mmap(nullptr, sizeof(long long), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    return p == MAP_FAILED ? nullptr : static_cast<const volatile long long*>(p);
  }();
  return at;
}

long long offset_ns() {
  const volatile long long* step = step_ms();
  return skew_ns() + (step ? *step * 1000000LL : 0LL);
}

bool is_wall_clock(clockid_t id) { return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE; }

}  // namespace

extern "C" {

int clock_gettime(clockid_t id, struct timespec* ts) {
  long r = ::syscall(SYS_clock_gettime, id, ts);
  if (r == 0 && is_wall_clock(id)) {
    long long total = static_cast<long long>(ts->tv_sec) * 1000000000LL + ts->tv_nsec + offset_ns();
    ts->tv_sec = static_cast<time_t>(total / 1000000000LL);
    ts->tv_nsec = static_cast<long>(total % 1000000000LL);
  }
  return static_cast<int>(r);
}

int gettimeofday(struct timeval* tv, void* /*tz*/) {
  struct timespec ts;
  int r = clock_gettime(CLOCK_REALTIME, &ts);
  if (r == 0) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = static_cast<suseconds_t>(ts.tv_nsec / 1000);
  }
  return r;
}

time_t time(time_t* out) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out) *out = ts.tv_sec;
  return ts.tv_sec;
}

}  // extern "C"
