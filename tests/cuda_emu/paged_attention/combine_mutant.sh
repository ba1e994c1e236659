#!/usr/bin/env bash
# run.sh with a mutated copy of the combine kernels' header in place of the repository's
# (mutations.sh passes it through tests/cuda_emu/run_mutations.sh).
# Usage: bash tests/cuda_emu/paged_attention/combine_mutant.sh BUILD_DIR HEADER_SOURCE
set -euo pipefail
EMU_COMBINE_SOURCE=$2 exec bash "$(dirname "$0")/run.sh" "$1"
