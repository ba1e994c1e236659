// CudaBackend ops: AppendKv, Attention (kernels in kernels/attention/paged_attention_cuda.h).
//
// Shape checks are shared with the CPU backend (op_checks.h). The batch description (positions,
// sequences, block tables) is host memory: it is validated on the host, flattened (slots for
// AppendKv; rows and concatenated block tables for Attention) and uploaded in one copy. Every
// layer of a step sees the same batch; StageToDevice skips an upload whose bytes equal the previous
// one into the same scratch, so the per-layer cost is one comparison.
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/op_checks.h"
#include "engine/base/status_macros.h"
#include "kernels/attention/paged_attention_cuda.h"

namespace stepserve {
struct CudaBackend::AttentionState {
  int sm_count = 0;
  std::vector<int64_t> slots;  // AppendKv: cache slot per row (-1: no sequence)
  Scratch slots_upload;
  std::vector<kernels::AttentionSeq> seqs;
  kernels::PagedAttentionCudaBatch batch;
  Scratch batch_upload;
  Scratch partials;  // split-K partial results
};

absl::Status CudaBackend::AppendKv(const TensorView& k, const TensorView& v,
                                   const AttentionBatch& batch, const KvCacheView& cache) {
  if (!attention_) attention_ = std::make_shared<AttentionState>();
  AttentionState& state = *attention_;
  ASSIGN_OR_RETURN(kernels::KvAppendArgs a, AppendKvOpArgs(k, v, batch, cache, &state.slots));
  // Sizes and slot ranges, on the host copy of the slots.
  if (kernels::KernelStatus s = kernels::ValidateKvAppend(a); s != kernels::KernelStatus::kOk) {
    return KernelResult(s, "AppendKv");
  }
  if (a.tokens == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const void* device_slots,
                   StageToDevice(state.slots_upload, state.slots.data(),
                                 state.slots.size() * sizeof(int64_t), "AppendKv slots"));
  a.slots = static_cast<const int64_t*>(device_slots);
  return KernelResult(kernels::KvAppendCuda(a, stream()), "AppendKv");
}

absl::Status CudaBackend::Attention(const TensorView& q, const AttentionBatch& batch,
                                    const KvCacheView& cache, const AttentionParams& params,
                                    const TensorView& out) {
  if (!attention_) attention_ = std::make_shared<AttentionState>();
  AttentionState& state = *attention_;
  // The host description: Q, out and the pages are device pointers, only checked for null.
  ASSIGN_OR_RETURN(kernels::PagedAttentionArgs host,
                   AttentionOpArgs(q, batch, cache, params, out, &state.seqs));
  RETURN_IF_ERROR(
      KernelResult(kernels::FlattenPagedAttentionBatch(host, &state.batch), "Attention"));
  if (state.batch.n_rows == 0) return absl::OkStatus();

  if (state.sm_count == 0) {
    RETURN_IF_ERROR(CudaResult(
        cudaDeviceGetAttribute(&state.sm_count, cudaDevAttrMultiProcessorCount, device()),
        "Attention: multiprocessor count"));
  }
  kernels::PagedAttentionCudaArgs a;
  a.q = host.q;
  a.q_stride = host.q_stride;
  a.out = host.out;
  a.out_stride = host.out_stride;
  a.n_rows = state.batch.n_rows;
  a.heads = host.heads;
  a.window = host.window;
  a.scale = host.scale;
  a.kv = cache;
  a.splits = kernels::PagedAttentionCudaSplits(a.n_rows, a.heads, cache.kv_heads,
                                               state.batch.max_visible, state.sm_count);
  if (a.splits > 1) {
    a.scratch_bytes =
        kernels::PagedAttentionCudaScratchBytes(a.n_rows, a.heads, cache.head_dim, a.splits);
    ASSIGN_OR_RETURN(a.scratch,
                     EnsureScratch(state.partials, a.scratch_bytes, "Attention split-K partials"));
  }
  ASSIGN_OR_RETURN(const void* device_words,
                   StageToDevice(state.batch_upload, state.batch.words.data(),
                                 state.batch.words.size() * sizeof(int32_t), "Attention batch"));
  const int32_t* words = static_cast<const int32_t*>(device_words);
  a.rows = reinterpret_cast<const kernels::PagedAttentionCudaRow*>(words);
  a.block_tables = words + state.batch.tables_offset;
  return KernelResult(kernels::PagedAttentionCuda(a, stream()), "Attention");
}

}  // namespace stepserve
