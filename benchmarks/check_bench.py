#!/usr/bin/env python3
"""Smoke test of the benchmark programs: runs each, briefly and filtered,
against a redis-server started here on a free port of 127.0.0.1 and given
as a URL, and checks that the run used that server, reported the PING
counter and printed its summary.

Also runs bench_cycle briefly against the same server: its table has every
subject, with redis-py's Lock among them (./dev installs python3-redis).

usage: check_bench.py BENCH_WIRE BENCH_LOCKS BENCH_CYCLE
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))
from private_redis import private_redis  # noqa: E402


def fail(msg):
    print("check_bench: " + msg, file=sys.stderr)
    sys.exit(1)


def calls(cli):
    """Commands the server has run (INFO commandstats)."""
    text = subprocess.run(cli + ["INFO", "commandstats"], capture_output=True, text=True).stdout
    return sum(int(l.split(":calls=")[1].split(",")[0]) for l in text.splitlines() if ":calls=" in l)


def run(exe, url, cli, bench_filter, expect):
    before = calls(cli)
    r = subprocess.run([exe, "--benchmark_filter=" + bench_filter, "--benchmark_min_time=0.01", url,
                        "--benchmark_color=false"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        fail(f"{exe} {url} exited {r.returncode}: {r.stderr[-2000:]}{r.stdout[-2000:]}")
    for text in expect:
        if text not in r.stdout:
            fail(f"{exe}: no {text!r} in its output:\n{r.stdout[-3000:]}")
    if calls(cli) - before < 100:
        fail(f"{exe} did not use the server at {url}")


def main():
    wire, locks, cycle = sys.argv[1], sys.argv[2], sys.argv[3]
    with private_redis() as (port, cli):
        url = f"redis://127.0.0.1:{port}"
        run(wire, url, cli, "BM_ping_plain_socket|BM_ping_connection",
            ["BM_ping_connection", "PING through the connection costs"])
        run(locks, url, cli, "BM_ping|/token/fixed/spin",
            ["lock_unlock/token/fixed/spin", "contended/token/fixed/spin", "threads:8",
             "many_locks/token/fixed/spin/64", "ping_us", "in_pings", "token/fixed/spin "])
        before = calls(cli)
        r = subprocess.run([cycle, url, "--rounds", "3", "--block", "20"], capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            fail(f"{cycle} {url} exited {r.returncode}: {r.stderr[-2000:]}")
        for text in ["2 PINGs, plain socket", "floor: Token's commands", "floor: redis-py's commands",
                     "redis-py Lock", "Token lock()/unlock()", "Lock<> acquire()/release()", "x redis-py rate"]:
            if text not in r.stdout:
                fail(f"{cycle}: no {text!r} in its output:\n{r.stdout}")
        if calls(cli) - before < 100:
            fail(f"{cycle} did not use the server at {url}")
        bad = subprocess.run([cycle, url, "--rounds", "0"], capture_output=True, text=True, timeout=60)
        if bad.returncode != 2 or "--rounds" not in bad.stderr:
            fail(f"{cycle} --rounds 0: exit {bad.returncode}, stderr {bad.stderr!r}")
    print("check_bench: ok")


if __name__ == "__main__":
    main()
