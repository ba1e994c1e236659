#!/usr/bin/env bash
# Runs an emulation against injected bugs: each sed expression applied to a copy of SOURCE, the
# emulation's run.sh run on the copy; every run must fail or crash ("caught").
# Usage (from a test's mutations.sh): bash tests/cuda_emu/run_mutations.sh SOURCE RUN_SH BUILD_DIR
#   SED_EXPRESSION...
set -uo pipefail
src=$1 run=$2 build=$3
shift 3
work=$(mktemp -d)
caught=0 i=0
for mutation in "$@"; do
  sed "$mutation" "$src" > "$work/mutant.cu"
  if cmp -s "$src" "$work/mutant.cu"; then
    echo "mutation $i did not apply: $mutation"
  elif EMU_WORK="$work/m$i" bash "$run" "$build" "$work/mutant.cu" > "$work/m$i.log" 2>&1; then
    echo "mutation $i NOT caught: $mutation"
  else
    echo "mutation $i caught ($(grep -c FAIL "$work/m$i.log") failing cases)"
    caught=$((caught + 1))
  fi
  i=$((i + 1))
done
echo "$caught of $# caught"
