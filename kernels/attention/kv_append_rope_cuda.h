// q/k norm + RoPE (kernels/rope/rope_cuda.h) and the KV append (paged_attention_cuda.h) of the
// same tokens in one launch: the k heads are normalised and rotated in place and their rotated
// values go straight into the cache from registers, the v heads are copied (or quantized) by
// warps of the same grid. One launch per layer instead of two - at batch 1 each costs ~4 us
// however little it moves. The values and bytes are those of QkNormRopeCuda followed by
// KvAppendCuda: the same device pieces (qk_norm_rope.cuh, kv_append_store.cuh) on the same floats.
#ifndef STEPSERVE_KERNELS_ATTENTION_KV_APPEND_ROPE_CUDA_H_
#define STEPSERVE_KERNELS_ATTENTION_KV_APPEND_ROPE_CUDA_H_

#include <cuda_runtime_api.h>

#include "kernels/attention/paged_attention.h"
#include "kernels/common/kernel_status.h"
#include "kernels/rope/rope_cuda.h"

namespace stepserve::kernels {

// Whether the two calls line up for the fused kernel: rope has k, the append writes that same k
// (pointer and stride) and the same tokens, and the cache's heads are rope's k heads.
bool QkNormRopeAppendCudaApplies(const QkNormRopeCudaArgs& rope, const KvAppendArgs& append);

// Validates both as QkNormRopeCuda and KvAppendCuda do (the slots' values are the caller's to
// check on the host, as for KvAppendCuda), kUnsupportedType when they do not line up, then
// enqueues the fused kernel on `stream`.
KernelStatus QkNormRopeAppendCuda(const QkNormRopeCudaArgs& rope, const KvAppendArgs& append,
                                  cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_ATTENTION_KV_APPEND_ROPE_CUDA_H_
