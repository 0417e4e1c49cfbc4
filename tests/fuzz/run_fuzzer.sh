#!/bin/sh
# A short libFuzzer run: FUZZER SCRATCH_DIR SEED_DIR. Writes new inputs and
# crash artifacts under SCRATCH_DIR only.
set -eu
mkdir -p "$2/artifacts"
exec "$1" "$2" "$3" -max_total_time="${DLOCK_FUZZ_SECONDS:-30}" -max_len=4096 -artifact_prefix="$2/artifacts/"
