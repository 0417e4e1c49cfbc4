#!/usr/bin/env python3
"""Rules of dlock's source tree that no compiler checks.

1. dlock's own policies and backends are written on dlock::ext, the surface
   a policy written outside dlock has: a header under policies/ names
   `detail::` only where a comment beginning "Not ext:" gives the reason, on
   the same line or in the 8 lines above it. The examples and the guide's
   code (docs/writing-a-policy.md) name no `detail::` at all.
2. No source file of the library, its policies or dlock-compare is longer
   than 450 lines (a file that grows past it is split by what it holds).

Usage: source_rules.py SOURCE_ROOT. Prints every breach; exits 1 on any.
"""
import pathlib
import re
import sys

WINDOW = 8
MAX_LINES = 450


def detail_without_reason(path):
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if "detail::" not in line:
            continue
        if any("Not ext:" in l for l in lines[max(0, i - WINDOW):i + 1]):
            continue
        yield i + 1, line.strip()


def guide_code_blocks(path):
    in_code = False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
        elif in_code:
            yield n, line


def main(root):
    root = pathlib.Path(root)
    breaches = []
    for header in sorted((root / "policies").rglob("*.hpp")):
        for n, text in detail_without_reason(header):
            breaches.append(f"{header.relative_to(root)}:{n}: names detail:: without a 'Not ext:' reason: {text}")
    for example in ["examples/own_policies.cpp", "examples/sharded_backend.hpp"]:
        for n, line in enumerate((root / example).read_text().splitlines(), 1):
            if "detail::" in line:
                breaches.append(f"{example}:{n}: an example names detail:: (use dlock::ext): {line.strip()}")
    guide = root / "docs" / "writing-a-policy.md"
    for n, line in guide_code_blocks(guide):
        if "detail::" in line:
            breaches.append(f"docs/writing-a-policy.md:{n}: the guide's code names detail:: (use dlock::ext): {line.strip()}")
    for folder in ["include", "policies", "src", "compare"]:
        for f in sorted((root / folder).rglob("*")):
            if f.suffix not in (".hpp", ".ipp", ".cpp", ".in", ".py") or not f.is_file():
                continue
            count = len(f.read_text().splitlines())
            if count > MAX_LINES:
                breaches.append(f"{f.relative_to(root)}: {count} lines, over {MAX_LINES}: split it by what it holds")
    for b in breaches:
        print(b)
    print(f"source_rules: {len(breaches)} breach(es)")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
