#!/usr/bin/env bash
# Injected bugs in the wide tensor-core GEMV (GemvMmaIq4XsWideKernel and its dispatch in
# LaunchGemvQ8xMma, gemv_mma_cuda.cu), each run through mutate.sh against test_gemv_mma.cc: every
# line should report FAIL cases. (Until session 15 the kernel looped over chunks of 32 rows and
# this list injected bugs into that loop; the loop is gone, one pass takes up to 32 rows - up to
# 64 until session 16.) Then the tall kernel (GemvMmaIq4XsTallKernel, gemv_mma_tall_cuda.cu,
# session 42): its K splits, the cluster reduction, the early weights and the stage ring.
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/gemv_mma_cuda.cu
m() { bash "$here/mutate.sh" "$@"; }
m no_store_guard $f 'if (r < rows) p.y[r * p.y_stride + o] = v;' 'p.y[r * p.y_stride + o] = v;'
m scale_row $f 'd_row1[j] = 8 * j + 2 * t + 1 < last ? 8 * j + 2 * t + 1 : last;' \
  'd_row1[j] = 8 * j + 2 * t < last ? 8 * j + 2 * t : last;'
m wide_threshold $f 'if (p.rows > kGemvMmaMaxRows) {' 'if (p.rows > kGemvMmaMaxRows + 1) {'
m clamp_off_by_one $f '    const int last = rows - 1;
    x_row[j]' '    const int last = rows - 2;
    x_row[j]'
t=matmul/gemv_mma_tall_cuda.cu
m tall_split_range $t 'const int64_t n_mine = (blockIdx.y + 1) * n_kp / splits - kp0;' \
  'const int64_t n_mine = (blockIdx.y + 1) * n_kp / splits - kp0 - (blockIdx.y > 0);'
m tall_reduce_skips_rank0 $t 'v[j] = ClusterLoadFloat4(&partial[warp][j][lane], 0);' \
  'v[j] = ClusterLoadFloat4(&partial[warp][j][lane], 1 % splits);'
m tall_reduce_rank $t 'if (warp % splits == rank) {' 'if (warp % splits == 0) {'
m tall_weights_stage $t 'Stage::template CopyWeights<true>(stage, p, p.w, o0, kp0 + s);' \
  'Stage::template CopyWeights<true>(stage, p, p.w, o0, kp0);'
m tall_ring_wait $t 'WaitCopiesButTwo();  // this thread' '/* no wait */  // this thread'
m tall_refill $t 'Stage::CopyPair(stage, p, p.w, o0, kp + kTallStages, full(kp + kTallStages), row_of);' \
  'Stage::CopyPair(stage, p, p.w, o0, kp + kTallStages - 1, full(kp + kTallStages), row_of);'
m tall_store_rows $t 'if (r1 < p.rows) p.y[r1 * p.y_stride + oa] = v[j].y;' 'p.y[r1 * p.y_stride + oa] = v[j].y;'
m tall_last_sync $t '  ClusterSync();  // no CTA leaves' '  // ClusterSync();  // no CTA leaves'
