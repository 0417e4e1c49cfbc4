#!/usr/bin/env python3
"""Compiles each file named on the command line and checks that it fails with
the sentence its first line promises ("// expect: ..."), or compiles when it
promises nothing. Usage: check.py COMPILER... -- FLAGS... -- FILES..."""
import concurrent.futures
import subprocess
import sys

args = sys.argv[1:]
first = args.index("--")
second = args.index("--", first + 1)
compiler, flags, files = args[:first], args[first + 1:second], args[second + 1:]


def check(path):
    with open(path) as f:
        expect = f.readline().split("expect:", 1)[1].strip()
    run = subprocess.run(compiler + flags + ["-fsyntax-only", path], capture_output=True, text=True)
    should_compile = expect.startswith("nothing")
    if should_compile:
        ok = run.returncode == 0
    else:
        ok = run.returncode != 0 and expect in run.stderr
    report = ("ok   " if ok else "FAIL ") + path + ": " + ("compiles" if should_compile else expect) + "\n"
    return ok, report + ("" if ok else run.stderr[-3000:])


# Two compilers at a time: the other tests beside this one mostly wait on
# servers.
failures = 0
with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    for ok, report in pool.map(check, files):
        sys.stdout.write(report)
        failures += 0 if ok else 1
print(f"{len(files) - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
