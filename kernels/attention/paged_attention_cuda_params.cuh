// Launch constants and the parameter block of the CUDA paged-attention kernels
// (paged_attention_cuda.cu; include from .cu files only). The chunk loaders
// (paged_attention_cuda_load.cuh) and the split-K combine (paged_attention_cuda_combine.cuh)
// read the same block.
#ifndef STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_PARAMS_CUH_
#define STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_PARAMS_CUH_

#include <cstdint>

#include "kernels/attention/paged_attention_cuda.h"

namespace stepserve::kernels::paged_attention_cuda {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 32;  // keys per chunk: one per lane in the score phase
constexpr int kHeadsPerCta = 16;
constexpr int kHeadsPerWarp = kHeadsPerCta / kWarps;
constexpr int kCombineThreads = 128;

// A field added here changes the struct's layout, and with it ptxas' register allocation of the
// attention kernels (one more field once cost the F32 / F16 kernels 17-39 registers and a
// spill): check `ptxas -v` after any change.
struct KernelParams {
  const float* q;
  int64_t q_stride;
  float* out;
  int64_t out_stride;
  const PagedAttentionCudaRow* rows;
  const int32_t* tables;
  const void* k_cache;
  const void* v_cache;
  int64_t num_blocks;
  int block_size;
  int kv_heads;
  int head_dim;
  int dims_padded;  // head_dim rounded up to 4 (Q and V rows in shared)
  int k_stride;     // floats between K rows in shared (padded against bank conflicts)
  int heads;
  int group;      // query heads per KV head
  int passes;     // CTAs per (row, KV head) when the group exceeds kHeadsPerCta
  int cta_heads;  // min(group, kHeadsPerCta): shared-memory rows for Q and probabilities
  int64_t window;
  float scale;
  int splits;
  bool vector_loads;  // head_dim a multiple of the 16-byte vector and the cache 16-byte aligned
  float* part_acc;    // split-K scratch: [rows][heads][splits][head_dim]
  float* part_max;    // [rows][heads][splits]
  float* part_sum;
  // Split-K with the combine in the attention kernel: one arrival counter per CTA column
  // (blockIdx.x), zero before the launch and zero again after it; nullptr: the combine kernel.
  int* arrivals;
  // The row and, with the early loads, the first chunk's page-table entries read before the
  // programmatic-launch wait (TablesBeforeWaitEnabled): both are staged by a host copy before
  // the step's kernels, never written by the kernel this one may overlap.
  bool tables_before_wait;
};

// Q / V rows in shared memory are head_dim rounded up to 4 floats; K rows are padded to an odd
// multiple of 4 floats, which spreads 8 lanes' float4 reads over all 32 banks.
__host__ __device__ constexpr int PaddedDims(int head_dim) { return (head_dim + 3) / 4 * 4; }
__host__ __device__ constexpr int KStride(int dims_padded) {
  return (dims_padded / 4) % 2 == 1 ? dims_padded : dims_padded + 4;
}

// The head geometry the decode kernel and its loaders read: from KernelParams (kDim == 0), or
// fixed at compile time (kDim > 0, the host launching that instantiation only for
// head_dim == kDim): the divisions, bounds and strides by it then fold into shifts and constants.
template <int kDim>
struct Geometry {
  int head_dim;
  int dims_padded;
  int k_stride;
  __device__ __forceinline__ explicit Geometry(const KernelParams& p)
      : head_dim(kDim > 0 ? kDim : p.head_dim),
        dims_padded(kDim > 0 ? PaddedDims(kDim) : p.dims_padded),
        k_stride(kDim > 0 ? KStride(PaddedDims(kDim)) : p.k_stride) {}
};

}  // namespace stepserve::kernels::paged_attention_cuda

#endif  // STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_PARAMS_CUH_
