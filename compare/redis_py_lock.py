#!/usr/bin/python3
"""dlock-compare's reference: redis-py's Lock (Debian's python3-redis) run
through the same two phases as every dlock combination, on the same server
in the same run, so that dlock's figures can be read against the lock most
Redis users already have.

  redis_py_lock.py version
      prints redis-py's version (exit 3, with nothing printed, when the
      redis module is missing)
  redis_py_lock.py serve URL KEY
      one Lock object on one connection, driven from standard input so that
      its cycles can alternate with the caller's own measurements: after a
      few warm-up cycles it prints "ready", then answers each line
        cycles N   N cycles of acquire() + release() back to back, each
                   timed: "samples <us> <us> ..."
      until the end of its input
  redis_py_lock.py worker URL LOCK COUNTER ID THREADS START_NS DURATION_NS
      THREADS threads, each with its own connection, run the inventory's
      critical section (GET COUNTER, SET it one higher) under LOCK from
      START_NS for DURATION_NS (CLOCK_MONOTONIC); prints, per cycle,
        cycle <worker> <acquire returned> <release called> <release returned>
      as dlock-compare's own workers do, and "error ..." per failure

The Lock is used as its documentation shows: a 30 s timeout (its lease),
blocking acquire with its default sleep of 0.1 s between tries. time.
monotonic_ns() reads CLOCK_MONOTONIC on Linux, the clock the C++ side uses.
"""
import sys
import threading
import time

try:
    import redis
except ImportError:
    redis = None


# dlock's rediss:// query names, as redis-py calls them (it passes a query
# argument it does not parse itself to its SSL connection by name).
TLS_NAMES = {"ca_file": "ssl_ca_certs", "ca_dir": "ssl_ca_path",
             "cert_file": "ssl_certfile", "key_file": "ssl_keyfile"}


def connect(url):
    if url.startswith("rediss://") and "?" in url:
        base, query = url.split("?", 1)
        items = [item.split("=", 1) for item in query.split("&") if item]
        if any(name not in TLS_NAMES for name, _ in items):
            sys.exit("redis_py_lock.py: a rediss:// query that redis-py cannot take: " + query)
        url = base + "?" + "&".join(TLS_NAMES[name] + "=" + value for name, value in items)
    return redis.Redis.from_url(url, socket_timeout=30)


def serve(url, key):
    r = connect(url)
    lock = r.lock(key, timeout=30)

    def cycle():
        t0 = time.perf_counter_ns()
        if not lock.acquire():
            raise RuntimeError("an uncontended blocking acquire returned False")
        lock.release()
        return f"{(time.perf_counter_ns() - t0) / 1000:.3f}"

    for _ in range(5):  # warm the connection and load the release script
        cycle()
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if len(words) == 2 and words[0] == "cycles" and words[1].isdigit():
            print("samples", " ".join(cycle() for _ in range(int(words[1]))), flush=True)
        else:
            print(f"error unknown request {line.strip()!r}", flush=True)
            return 2
    return 0


def worker(url, lock_name, counter, ident, threads, start_ns, duration_ns):
    end_ns = start_ns + duration_ns
    lines = [[] for _ in range(threads)]

    def run(t):
        me = f"{ident}.{t}"
        out = lines[t]
        try:
            r = connect(url)
            lock = r.lock(lock_name, timeout=30)
            left = start_ns - time.monotonic_ns()
            if left > 0:
                time.sleep(left / 1e9)
            else:  # the run began without it: say so rather than count too few
                out.append(f"error {me} started {-left / 1e6:.0f} ms after the run began")
            while True:
                left = end_ns - time.monotonic_ns()
                if left <= 0 or not lock.acquire(blocking_timeout=left / 1e9):
                    break
                acquired = time.monotonic_ns()
                v = r.get(counter)
                r.set(counter, (int(v) if v is not None else 0) + 1)
                release_sent = time.monotonic_ns()
                try:
                    lock.release()
                except redis.exceptions.LockError as e:
                    out.append(f"error {me} release: {e}")
                out.append(f"cycle {me} {acquired} {release_sent} {time.monotonic_ns()}")
        except Exception as e:  # reported to the parent, which counts it
            out.append(f"error {me} {type(e).__name__}: {e}".replace("\n", " "))

    pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for p in pool:
        p.start()
    for p in pool:
        p.join()
    print("\n".join(line for each in lines for line in each))


def main(argv):
    if redis is None:
        return 3
    if argv[:1] == ["version"]:
        print(redis.__version__)
    elif argv[:1] == ["serve"] and len(argv) == 3:
        return serve(argv[1], argv[2])
    elif argv[:1] == ["worker"] and len(argv) == 8:
        worker(argv[1], argv[2], argv[3], argv[4], int(argv[5]), int(argv[6]), int(argv[7]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
