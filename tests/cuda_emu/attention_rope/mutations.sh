#!/usr/bin/env bash
# Injected bugs in the decode attention's own rope and KV append that the emulation must catch
# (each run must fail or crash).
# Usage: bash tests/cuda_emu/attention_rope/mutations.sh [BUILD_DIR]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
src="$root/kernels/attention/paged_attention_cuda.cu"
mutations=(
  # the new key and value not put into the first chunk (the stale slot's values scored)
  's/if (holds_new_key \&\& position < c0 + kChunk) {/if (holds_new_key \&\& position < c0 + kChunk \&\& c0 != lo) {/'
  # nor into a later chunk of its split
  's/if (holds_new_key \&\& position < c0 + kChunk) {/if (holds_new_key \&\& position < c0 + kChunk \&\& c0 == lo) {/'
  # nor into any chunk
  '/PutNewKeyValue(static_cast<int>(position - c0)/s/PutNewKeyValue(/if (false) PutNewKeyValue(/'
  # no CTA writes the new key and value to the cache
  's/pass == 0 \&\& new_base >= 0, rope_s.new_k/false, rope_s.new_k/'
  # the new key one row late in its chunk
  's/PutNewKeyValue(static_cast<int>(position - c0),/PutNewKeyValue(static_cast<int>(position - c0 + 1) % kChunk,/'
  # the query heads normalised with the key's weight
  's/kv_warp, q_weight, k_weight,/kv_warp, k_weight, k_weight,/'
)
bash "$root/tests/cuda_emu/run_mutations.sh" "$src" "$here/run.sh" "${1:-$root/build}" "${mutations[@]}"
