#!/usr/bin/env bash
# run.sh with a mutated copy of the tensor-core decode kernel's header
# (kernels/attention/paged_attention_cuda_mma.cuh) in place of the repository's (mutations.sh
# passes it through tests/cuda_emu/run_mutations.sh).
# Usage: bash tests/cuda_emu/paged_attention/mma_mutant.sh BUILD_DIR HEADER_SOURCE
set -euo pipefail
EMU_MMA_SOURCE=$2 exec bash "$(dirname "$0")/run.sh" "$1"
