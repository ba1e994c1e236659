// The logits row reductions of logits_topk.h on a CUDA device: logits and every output in device
// memory, the work enqueued on `stream` as two kernel launches, no allocation, no host
// synchronisation (capturable in a CUDA graph).
//
//   1. One CTA per (row, chunk of kLogitsTopKChunk = 4096 entries): the chunk's max and
//      sum of exp(x - chunk max) in float, and its top min(k, chunk) entries by an 8-bit radix
//      select over (order key, token id) held in registers, written to the scratch buffer.
//   2. One CTA per row: the row's top min(k, vocab) by the same radix select over the chunks'
//      survivors (in registers up to 8192 of them, i.e. k = 256 at vocab <= 131072; read through
//      L2 beyond), a bitonic sort, argmax / row_max from the first survivor, and the log-sum-exp
//      from the chunk (max, sum) pairs in double.
// With top_ids and top_logits both null the selection is a block max (the k = 1 path).
//
// Measured (vocab 128896, random normal logits, 200 calls replayed from one CUDA graph, H100,
// 2026-12-02): rows 1: 6.0 us argmax only (k = 1), 13.8 us k = 40, 20.7 us k = 256; rows 4: 6.6 /
// 14.9 / 23.0 us; rows 16: 9.0 / 20.2 / 28.0 us; rows 64: 21.4 / 47.2 / 61.8 us (k = 1 reads the
// logits at 1.5 TB/s). Compare: downloading one row of logits is 515 KB. Those figures came from
// a one-off timing program; bench/gpu/bench_row_kernels now times the same cases
// ("logits_topk" lines, pattern-filled logits) and has not been run on a device yet.
//
// Ids, argmax, row_max and top_logits match LogitsTopKRef exactly (top_logits and row_max are
// copied from the logits, bit for bit). log_sum_exp: |gpu - ref| <= 1e-5 * max(1, |ref|) (float
// exp within 2 ulp, float x - chunk max, float sums of at most 16 terms per thread plus an 8-level
// tree within a chunk: ~3e-6 absolute in the worst case; chunk sums combined in double), so the
// relative error is below 1e-5 wherever |log_sum_exp| >= 1 (a full vocabulary's is ~log(vocab)).
#ifndef STEPSERVE_KERNELS_SAMPLING_LOGITS_TOPK_CUDA_H_
#define STEPSERVE_KERNELS_SAMPLING_LOGITS_TOPK_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/kernel_status.h"
#include "kernels/sampling/logits_topk.h"

namespace stepserve::kernels {

// Entries per chunk CTA of the first launch.
inline constexpr int64_t kLogitsTopKChunk = 4096;

// Device scratch that LogitsTopKCuda needs for these sizes (0 when rows <= 0, vocab <= 0 or k <=
// 0): rows * ceil(vocab / 4096) * (8 * k + 8) bytes, e.g. 64 rows, vocab 128896, k 256: 4.2 MB; k 1
// (or top outputs null): 33 KB. Size it once for the largest (rows, k) a caller will use: a buffer
// sized for larger rows or k serves smaller ones.
size_t LogitsTopKCudaScratchBytes(int64_t rows, int64_t vocab, int32_t k);

// Validates (ValidateLogitsTopK), checks that `scratch` (device memory, 8-byte aligned) holds
// LogitsTopKCudaScratchBytes(rows, vocab, k) bytes (kInvalidArgument otherwise), then enqueues
// the two kernels on `stream`. kInvalidArgument also when a launch fails (the CUDA error is
// cleared). The scratch must not be used by other work until the second kernel finishes (stream
// order does that when it is reused on the same stream).
KernelStatus LogitsTopKCuda(const LogitsTopKArgs& args, void* scratch, size_t scratch_bytes,
                            cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_SAMPLING_LOGITS_TOPK_CUDA_H_
