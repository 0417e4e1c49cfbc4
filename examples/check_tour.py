#!/usr/bin/env python3
"""Runs one tour program and checks its verdict: the program must exit 0 and
print a line "verdict: ..." that contains the expected text.
Usage: check_tour.py PROGRAM EXPECTED [ARGS...]"""
import subprocess
import sys

program, expected, args = sys.argv[1], sys.argv[2], sys.argv[3:]
run = subprocess.run([program] + args, capture_output=True, text=True, timeout=600)
sys.stdout.write(run.stdout)
sys.stderr.write(run.stderr)
verdicts = [l for l in run.stdout.splitlines() if l.startswith("verdict: ")]
if run.returncode != 0:
    print(f"check_tour: {program} exited with {run.returncode}")
    sys.exit(1)
if not any(expected in v for v in verdicts):
    print(f"check_tour: no verdict line contains '{expected}' (verdicts: {verdicts})")
    sys.exit(1)
print(f"check_tour: ok, '{expected}'")
