#!/usr/bin/env bash
# Injected bugs in the fused kernel that the emulation must catch (each run must fail or crash).
# Usage: bash tests/cuda_emu/rope_append/mutations.sh [BUILD_DIR]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
src="$root/kernels/attention/kv_append_rope_cuda.cu"
mutations=(
  's/CacheHead<kDtype>(params.v_cache, slot, kh,/CacheHead<kDtype>(params.k_cache, slot, kh,/'
  's/const bool cache = slot >= 0 \&\& slot < params.total_slots;/const bool cache = slot < params.total_slots;/'
  's/heads = qk_heads + a.k_heads;/heads = qk_heads;/'
  's/slot \* kv_heads \* dh + kh \* dh;/slot * kv_heads * dh + kh;/'
  's/(slot \* row_blocks + kh \* dh \/ kKvQ8BlockElems)/(slot * row_blocks + kh)/'
  's/if (!is_q \&\& cache) {/if (is_q \&\& cache) {/'
  's/values\[m\] = i < dh ? x\[i\] : 0.0f;/values[m] = i < dh ? x[i \/ 2] : 0.0f;/'
  's/if (m \* kWarpSize < dh) kv_append::StoreQ8Block/if (m * kWarpSize < dh - 32) kv_append::StoreQ8Block/'
)
bash "$root/tests/cuda_emu/run_mutations.sh" "$src" "$here/run.sh" "${1:-$root/build}" "${mutations[@]}"
