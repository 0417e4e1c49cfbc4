#!/usr/bin/env python3
"""Lock<> is compiled once, in libdlock: a file that uses it must not
compile its engine again. Reads the symbols NM finds defined in the object
code built from benchmarks/compile/default_lock.cpp, and fails if any
belongs to Lock's engine (a member of dlock::Lock, the renewal service, the
lease watch, the script batches): the sign that something inline in the
interface instantiates the engine in every file (`./dev bench compile`
measures what that costs).

usage: check_precompiled.py NM OBJECT_OR_ARCHIVE
"""
import subprocess
import sys

ENGINE = ("dlock::Lock<", "dlock::detail::lease_watch", "dlock::detail::renewal_service",
          "dlock::detail::script_batches", "dlock::detail::timer_loop")


def main():
    nm, obj = sys.argv[1], sys.argv[2]
    r = subprocess.run([nm, "-C", "--defined-only", obj], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check_precompiled: {nm} {obj} failed: {r.stderr}")
    symbols = [line for line in r.stdout.splitlines() if line.strip() and not line.endswith(":")]
    if not any(" main" in line for line in symbols):
        sys.exit(f"check_precompiled: no main in {obj}: not the file it should read\n{r.stdout[:2000]}")
    engine = [line for line in symbols if any(name in line for name in ENGINE)]
    if engine:
        print(f"check_precompiled: {len(engine)} symbols of Lock's engine are compiled in a file that uses Lock<>:",
              file=sys.stderr)
        for line in engine[:20]:
            print("  " + line[:300], file=sys.stderr)
        sys.exit(1)
    print(f"check_precompiled: {len(symbols)} symbols, none of Lock's engine")


if __name__ == "__main__":
    main()
