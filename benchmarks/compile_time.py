#!/usr/bin/env python3
"""What a file that takes a lock costs to compile, as a ratio to a file that
includes Asio alone, measured in one run.

Each round compiles every subject once, in an order that turns by one each
round (so drift on a shared machine falls on every subject alike), and takes
each subject's time as a ratio to the Asio file's time in the same round.
The figure is the median of those ratios.

    ./dev bench compile                  # this tree, 5 rounds
    ./dev bench compile --before 4351121 # also a past commit, in the same rounds
    ./dev bench compile --before 4351121 --only custom --rounds 15

Subjects (benchmarks/compile/*.cpp): asio_only (the yardstick), default_lock
(Lock<>, compiled in libdlock), custom_lock (Token/FixedLease/Spin, compiled
in the file). With --before REV, the default and custom files are compiled a
second time against that commit's headers (a git worktree in a temporary
folder), so "before" and "now" share every round, and the ratio of each
file's time now to its time before, round by round, is printed too.
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = os.path.join(ROOT, "benchmarks", "compile")


def compile_seconds(cmd):
    start = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit("compile failed: " + " ".join(shlex.quote(c) for c in cmd) + "\n" + r.stderr[-4000:])
    return elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"), help="compiler (default: g++)")
    ap.add_argument("--opt", default="-O2", help="optimization flag (default: -O2)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", metavar="REV", help="also compile against this commit's headers")
    ap.add_argument("--only", metavar="TEXT", help="only the lock files whose name contains TEXT (asio_only always runs)")
    args = ap.parse_args()
    if args.rounds < 1:
        sys.exit("--rounds must be at least 1")

    base = [args.cxx, "-std=c++20", args.opt, "-c", "-o", os.devnull]
    trees = {"now": ROOT}  # "now" is the working tree, uncommitted edits included
    worktree = None
    if args.before:
        worktree = tempfile.mkdtemp(prefix="dlock-before-")
        r = subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", worktree, args.before],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            os.rmdir(worktree)
            sys.exit(f"--before {args.before}: {r.stderr.strip()}")
        trees = {"before": worktree, "now": ROOT}

    def flags(tree):
        return ["-I", os.path.join(tree, "include"), "-I", os.path.join(tree, "policies")]

    subjects = {"asio_only": base + [os.path.join(FILES, "asio_only.cpp")]}
    for label, tree in trees.items():
        for name in ("default_lock", "custom_lock"):
            if args.only and args.only not in name:
                continue
            subjects[f"{name} ({label})"] = base + flags(tree) + [os.path.join(FILES, name + ".cpp")]

    names = list(subjects)
    times = {n: [] for n in names}
    try:
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                times[n].append(compile_seconds(subjects[n]))
            print(f"round {r + 1}/{args.rounds}: " +
                  ", ".join(f"{n} {times[n][-1]:.2f} s" for n in names), file=sys.stderr, flush=True)
    finally:
        if worktree:
            r = subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", worktree],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                print(f"could not remove the worktree {worktree}: {r.stderr.strip()}", file=sys.stderr)

    cxx = subprocess.run([args.cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"compile time, {cxx}, -std=c++20 {args.opt}, {args.rounds} rounds, "
          f"median of per-round ratios to asio_only (median {statistics.median(times['asio_only']):.2f} s)")
    print(f"{'file':28} {'median s':>9} {'ratio':>7} {'ratio range':>13}")
    for n in names:
        ratios = [t / a for t, a in zip(times[n], times["asio_only"])]
        print(f"{n:28} {statistics.median(times[n]):9.2f} {statistics.median(ratios):6.2f}x "
              f"{min(ratios):6.2f}-{max(ratios):.2f}x")
    if args.before:
        # Now against before, file by file, round by round: the direct A/B.
        for name in ("default_lock", "custom_lock"):
            now, before = times.get(f"{name} (now)"), times.get(f"{name} (before)")
            if now and before:
                ratios = [a / b for a, b in zip(now, before)]
                print(f"{name}: now / before {statistics.median(ratios):.2f}x "
                      f"({min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} rounds)")


if __name__ == "__main__":
    main()
