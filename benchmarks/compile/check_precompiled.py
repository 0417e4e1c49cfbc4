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
import re
import subprocess
import sys

# The engine: the renewal and loss-watch machinery, and Lock's members that
# are compiled in libdlock (constructor, destructor, the acquire and release
# operations and their blocking glue). Lock's inline interface (lock(),
# try_lock_for<Rep, Period>, std::lock_guard<Lock<>>) may be compiled in the
# file, and is at -O0.
ENGINE = re.compile(r"dlock::detail::(lease_watch|renewal_service|script_batches|timer_loop)"
                    r"|dlock::Lock<.*>::(~?Lock|acquire_op|release_op|try_once|give_back|release_won|settle_win"
                    r"|keep_if_acknowledged|retire|acquire_hold|release_hold|drop_one|acquire_blocking"
                    r"|run_blocking|acquire_hold_blocking|release_blocking|release_hold_blocking"
                    r"|release_abandoned|report|make_record|try_lock_until_steady|check_blocking_allowed)\b")


def main():
    nm, obj = sys.argv[1], sys.argv[2]
    r = subprocess.run([nm, "-C", "--defined-only", obj], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check_precompiled: {nm} {obj} failed: {r.stderr}")
    symbols = [line for line in r.stdout.splitlines() if line.strip() and not line.endswith(":")]
    if not any(" main" in line for line in symbols):
        sys.exit(f"check_precompiled: no main in {obj}: not the file it should read\n{r.stdout[:2000]}")
    engine = [line for line in symbols if ENGINE.search(line)]
    if engine:
        print(f"check_precompiled: {len(engine)} symbols of Lock's engine are compiled in a file that uses Lock<>:",
              file=sys.stderr)
        for line in engine[:20]:
            print("  " + line[:300], file=sys.stderr)
        sys.exit(1)
    print(f"check_precompiled: {len(symbols)} symbols, none of Lock's engine")


if __name__ == "__main__":
    main()
