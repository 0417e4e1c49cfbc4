#!/bin/sh
# A short libFuzzer run: FUZZER SCRATCH_DIR SEED_DIR, for DLOCK_FUZZ_SECONDS
# (30 by default; ./dev test gives 60). The scratch corpus comes first, so
# that new inputs are written there and never into the source tree; crash
# artifacts go under SCRATCH_DIR/artifacts. Prints the run's final stats
# (executions per second) and the corpus's size; the fuzzer's whole output
# is in SCRATCH_DIR.log (and its last lines here when it fails).
set -u
log="${2%/}.log"  # beside the corpus: not an input
rm -rf "$2/artifacts"  # only this run's
mkdir -p "$2/artifacts"
status=0
"$1" "$2" "$3" -max_total_time="${DLOCK_FUZZ_SECONDS:-30}" -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$2/artifacts/" > "$log" 2>&1 || status=$?
grep -E '^(INFO: seed corpus|#[0-9]+[[:space:]]+DONE|Done |stat::)' "$log"
echo "run_fuzzer: corpus: $(find "$2" -maxdepth 1 -type f | wc -l) inputs in the scratch corpus, $(find "$3" -maxdepth 1 -type f | wc -l) seeds"
if [ "$status" -ne 0 ]; then
  tail -n 60 "$log"
  echo "run_fuzzer: the fuzzer failed ($status). Its input is in $2/artifacts/:" >&2
  ls -1 "$2/artifacts/" >&2
  echo "run_fuzzer: fix the parser, then commit that input to $3/ as regression-<what>" >&2
fi
exit "$status"
