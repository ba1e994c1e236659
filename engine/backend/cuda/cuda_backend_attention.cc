// CudaBackend ops: AppendKv, QkNormRopeAppendKv, Attention (kernels in
// kernels/attention/paged_attention_cuda.h and kv_append_rope_cuda.h).
//
// Shape checks are shared with the CPU backend (op_checks.h). The batch description (positions,
// sequences, block tables) is host memory: it is validated on the host, flattened (slots for
// AppendKv; rows and concatenated block tables for Attention) and uploaded in one copy. Every
// layer of a step sees the same batch; StageToDevice skips an upload whose bytes equal the previous
// one into the same scratch, so the per-layer cost is one comparison.
//
// Prefill: with the tensor-core prefill kernel on (the default; STEPSERVE_PREFILL_ATTENTION=0 or
// SetPrefillAttentionCuda(false) turn it off, and exact mode does not use it) and supported
// (head_dim 128 / 192), an eager batch whose every row is in a run of at least kPrefillMinRows
// consecutive positions of one sequence runs through PrefillAttentionCuda; anything else (decode
// rows, mixed batches, recorded steps) keeps PagedAttentionCuda.
//
// Split-K decode: the partials and the fused combine's arrival counters (zeroed when allocated,
// left zero by every launch) live in AttentionState; the combine runs in the attention kernel with
// STEPSERVE_ATTN_FUSED_COMBINE=1 or kernels::SetPagedAttentionCudaFusedCombine(true), else (the
// default) in a kernel of its own.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/op_checks.h"
#include "engine/base/status_macros.h"
#include "kernels/attention/kv_append_rope_cuda.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/common/env_switch.h"
#include "kernels/elementwise/elementwise_cuda.h"

namespace stepserve {
namespace {

// Shorter runs (decode rows, tiny chunks) would leave most of a 64-row tile's MMA rows idle.
constexpr int64_t kPrefillMinRows = 16;

// QkNormRopeAppendKv in one kernel unless STEPSERVE_ROPE_APPEND=0 (read once). Measured on the
// H200 (session 13, 45 layers IQ4_XS): batch 1 5.305 / 5.333 -> 5.260 / 5.222 ms, batch 2
// 7.505 / 7.546 -> 7.400 / 7.358 ms (bench/gpu/results-h200-v12.txt); same bits as the two
// kernels (rope_append_cuda_test).
bool RopeAppendFused() {
  static const bool on = kernels::EnvSwitchOn("STEPSERVE_ROPE_APPEND");
  return on;
}

// The head gate in the split-K combine (AttentionHeadGate) unless STEPSERVE_ATTN_GATE_IN_COMBINE=0
// (then Attention and HeadGate, for A/B runs).
bool GateInCombine() {
  static const bool on = kernels::EnvSwitchOn("STEPSERVE_ATTN_GATE_IN_COMBINE");
  return on;
}

// The head gate in the prefill attention kernel's epilogue (AttentionHeadGate on prefill tiles)
// unless STEPSERVE_PREFILL_ATTN_GATE=0: one pass over the attention output fewer per layer.
bool PrefillGateInAttention() {
  static const bool on = kernels::EnvSwitchOn("STEPSERVE_PREFILL_ATTN_GATE");
  return on;
}

}  // namespace

struct CudaBackend::AttentionState {
  int sm_count = 0;
  std::vector<int64_t> slots;  // AppendKv: cache slot per row (-1: no sequence)
  Scratch slots_upload;
  std::vector<kernels::AttentionSeq> seqs;
  kernels::PagedAttentionCudaBatch batch;
  Scratch batch_upload;
  Scratch partials;  // split-K partial results
  // Split-K arrival counters of the fused combine: zeroed whenever the area is (re)allocated,
  // and every attention launch leaves them zero. Not part of `partials`: that area's layout
  // follows each launch's shape, so its bytes under a fixed counter area would not stay zero.
  Scratch split_arrivals;
  std::vector<kernels::PrefillTileCuda> prefill_tiles;
  Scratch prefill_tiles_upload;
};

absl::StatusOr<kernels::KvAppendArgs> CudaBackend::AppendKvArgs(const TensorView& k,
                                                                const TensorView& v,
                                                                const AttentionBatch& batch,
                                                                const KvCacheView& cache) {
  if (!attention_) attention_ = std::make_shared<AttentionState>();
  AttentionState& state = *attention_;
  ASSIGN_OR_RETURN(kernels::KvAppendArgs a, AppendKvOpArgs(k, v, batch, cache, &state.slots));
  // Sizes and slot ranges, on the host copy of the slots.
  if (kernels::KernelStatus s = kernels::ValidateKvAppend(a); s != kernels::KernelStatus::kOk) {
    return KernelResult(s, "AppendKv");
  }
  if (a.tokens == 0) return a;
  const void* device_slots = nullptr;
  if (recording_step()) {
    const int list = StepSeqList(batch.seqs);
    if (list < 0 || batch.positions.data() != recording_description().positions.data()) {
      return AbandonRecording("AppendKv batch is not the step's");
    }
    // The slots depend on the sequence list and the cache's page geometry only.
    auto recipe = [k, v, cache, list](const StepDescription& next, std::vector<uint8_t>* bytes) {
      std::vector<int64_t> slots;
      const AttentionBatch next_batch{next.positions, next.seq_lists[list]};
      ASSIGN_OR_RETURN(const kernels::KvAppendArgs args,
                       AppendKvOpArgs(k, v, next_batch, cache, &slots));
      if (kernels::ValidateKvAppend(args) != kernels::KernelStatus::kOk) {
        return absl::OutOfRangeError("AppendKv: a slot of the step is outside the cache");
      }
      const auto* begin = reinterpret_cast<const uint8_t*>(slots.data());
      bytes->assign(begin, begin + slots.size() * sizeof(int64_t));
      return absl::OkStatus();
    };
    ASSIGN_OR_RETURN(
        device_slots,
        StageStepInput(absl::StrFormat("slots/%d/%d/%d", list, cache.block_size, cache.num_blocks),
                       state.slots.data(), state.slots.size() * sizeof(int64_t), "AppendKv slots",
                       recipe));
  } else {
    ASSIGN_OR_RETURN(device_slots,
                     StageToDevice(state.slots_upload, state.slots.data(),
                                   state.slots.size() * sizeof(int64_t), "AppendKv slots"));
  }
  a.slots = static_cast<const int64_t*>(device_slots);
  return a;
}

absl::Status CudaBackend::AppendKv(const TensorView& k, const TensorView& v,
                                   const AttentionBatch& batch, const KvCacheView& cache) {
  ForgetPrequantized();
  ASSIGN_OR_RETURN(const kernels::KvAppendArgs a, AppendKvArgs(k, v, batch, cache));
  if (a.tokens == 0) return absl::OkStatus();
  return KernelResult(kernels::KvAppendCuda(a, stream()), "AppendKv");
}

absl::Status CudaBackend::QkNormRopeAppendKv(const TensorView& q, const TensorView& k,
                                             const TensorView& v, const QkNormRopeParams& params,
                                             const AttentionBatch& batch,
                                             const KvCacheView& cache) {
  if (!RopeAppendFused()) return Backend::QkNormRopeAppendKv(q, k, v, params, batch, cache);
  ForgetPrequantized();
  ASSIGN_OR_RETURN(const kernels::QkNormRopeCudaArgs rope,
                   QkNormRopeArgs(q, k, params, batch.positions));
  ASSIGN_OR_RETURN(const kernels::KvAppendArgs append, AppendKvArgs(k, v, batch, cache));
  if (rope.tokens > 0 && kernels::QkNormRopeAppendCudaApplies(rope, append)) {
    return KernelResult(kernels::QkNormRopeAppendCuda(rope, append, stream()),
                        "QkNormRopeAppendKv");
  }
  // Shapes the fused kernel does not take: the two kernels on the arguments already staged.
  if (rope.tokens > 0) {
    RETURN_IF_ERROR(KernelResult(kernels::QkNormRopeCuda(rope, stream()), "QkNormRope"));
  }
  if (append.tokens == 0) return absl::OkStatus();
  return KernelResult(kernels::KvAppendCuda(append, stream()), "AppendKv");
}

absl::Status CudaBackend::Attention(const TensorView& q, const AttentionBatch& batch,
                                    const KvCacheView& cache, const AttentionParams& params,
                                    const TensorView& out) {
  return RunAttention(q, batch, cache, params, out, {}).status();
}

absl::Status CudaBackend::AttentionHeadGate(const TensorView& q, const AttentionBatch& batch,
                                            const KvCacheView& cache, const AttentionParams& params,
                                            const TensorView& gate_logits, int64_t head_dim,
                                            const TensorView& out) {
  ASSIGN_OR_RETURN(const bool gated,
                   RunAttention(q, batch, cache, params, out,
                                {GateInCombine() ? &gate_logits : nullptr, head_dim}));
  if (gated) return absl::OkStatus();
  return HeadGate(out, gate_logits, head_dim);
}

absl::StatusOr<bool> CudaBackend::RunAttention(const TensorView& q, const AttentionBatch& batch,
                                               const KvCacheView& cache,
                                               const AttentionParams& params, const TensorView& out,
                                               GateRequest gate) {
  ForgetPrequantized();
  if (!attention_) attention_ = std::make_shared<AttentionState>();
  AttentionState& state = *attention_;
  // The host description: Q, out and the pages are device pointers, only checked for null.
  ASSIGN_OR_RETURN(kernels::PagedAttentionArgs host,
                   AttentionOpArgs(q, batch, cache, params, out, &state.seqs));
  RETURN_IF_ERROR(
      KernelResult(kernels::FlattenPagedAttentionBatch(host, &state.batch), "Attention"));
  if (state.batch.n_rows == 0) return false;

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
  // Never while a step is recorded: a replay would reuse tiles built for another batch. Not in
  // exact mode either: the tensor-core kernel rounds Q, K, V and P to F16 (~3e-4 relative on a
  // row), which in a whole model is enough to flip a near-tied MoE routing choice now and then
  // (H200, model_cuda_test at 533 tokens: 2 of 533 logits rows off by 0.17); exact mode promises
  // F32 math, like its F32 activations in the matmuls.
  if (!recording_step() && !exact_activations_ && kernels::PrefillAttentionCudaEnabled() &&
      kernels::PrefillAttentionCudaSupports(cache) &&
      kernels::BuildPrefillTiles(state.batch, kPrefillMinRows, &state.prefill_tiles) == 0) {
    ASSIGN_OR_RETURN(const void* device_words,
                     StageToDevice(state.batch_upload, state.batch.words.data(),
                                   state.batch.words.size() * sizeof(int32_t), "Attention batch"));
    ASSIGN_OR_RETURN(const void* device_tiles,
                     StageToDevice(state.prefill_tiles_upload, state.prefill_tiles.data(),
                                   state.prefill_tiles.size() * sizeof(kernels::PrefillTileCuda),
                                   "Attention prefill tiles"));
    const int32_t* words = static_cast<const int32_t*>(device_words);
    a.rows = reinterpret_cast<const kernels::PagedAttentionCudaRow*>(words);
    a.block_tables = words + state.batch.tables_offset;
    bool gated = false;
    if (gate.gate_logits != nullptr && gate.head_dim == cache.head_dim &&
        PrefillGateInAttention()) {
      ASSIGN_OR_RETURN(const kernels::HeadGateArgs g,
                       HeadGateOpArgs(out, *gate.gate_logits, gate.head_dim));
      a.gate = g.gate;
      a.gate_stride = g.gate_stride;
      gated = true;
    }
    RETURN_IF_ERROR(KernelResult(
        kernels::PrefillAttentionCuda(a, static_cast<const kernels::PrefillTileCuda*>(device_tiles),
                                      static_cast<int64_t>(state.prefill_tiles.size()), stream()),
        "Attention"));
    return gated;
  }
  a.f32_math_only = exact_activations_;  // exact mode: no F16 tensor-core attention either
  a.splits = kernels::PagedAttentionCudaSplits(a.n_rows, a.heads, cache.kv_heads,
                                               state.batch.max_visible, state.sm_count);
  a.sm_count = state.sm_count;
  if (a.splits > 1) {
    a.scratch_bytes =
        kernels::PagedAttentionCudaScratchBytes(a.n_rows, a.heads, cache.head_dim, a.splits);
    ASSIGN_OR_RETURN(a.scratch,
                     EnsureScratch(state.partials, a.scratch_bytes, "Attention split-K partials"));
    a.split_arrival_count =
        kernels::PagedAttentionCudaArrivalCount(a.n_rows, a.heads, cache.kv_heads);
    const size_t previous_bytes = state.split_arrivals.bytes;
    ASSIGN_OR_RETURN(void* arrivals,
                     EnsureScratch(state.split_arrivals, a.split_arrival_count * sizeof(int32_t),
                                   "Attention split-K counters"));
    // A new area (EnsureScratch only ever grows it; a moved one invalidated every recorded graph).
    if (state.split_arrivals.bytes != previous_bytes) {
      RETURN_IF_ERROR(CudaResult(cudaMemsetAsync(arrivals, 0, state.split_arrivals.bytes, stream()),
                                 "Attention"));
    }
    a.split_arrivals = static_cast<int32_t*>(arrivals);
  }
  const void* device_words = nullptr;
  if (recording_step()) {
    const int list = StepSeqList(batch.seqs);
    if (list < 0 || batch.positions.data() != recording_description().positions.data()) {
      return AbandonRecording("Attention batch is not the step's");
    }
    // Rows and block tables depend on the sequence list only; the recorded split count (and the
    // partials it sized) must still be the one the next step's contexts call for.
    const int64_t splits = a.splits;
    const int sm_count = state.sm_count;
    auto recipe = [q, cache, params, out, list, splits, sm_count](const StepDescription& next,
                                                                  std::vector<uint8_t>* bytes) {
      std::vector<kernels::AttentionSeq> seqs;
      const AttentionBatch next_batch{next.positions, next.seq_lists[list]};
      ASSIGN_OR_RETURN(kernels::PagedAttentionArgs host,
                       AttentionOpArgs(q, next_batch, cache, params, out, &seqs));
      kernels::PagedAttentionCudaBatch flat;
      if (kernels::FlattenPagedAttentionBatch(host, &flat) != kernels::KernelStatus::kOk) {
        return absl::InvalidArgumentError("Attention: the step's batch does not validate");
      }
      if (kernels::PagedAttentionCudaSplits(flat.n_rows, host.heads, cache.kv_heads,
                                            flat.max_visible, sm_count) != splits) {
        return absl::AbortedError("Attention: split count changed");
      }
      const auto* begin = reinterpret_cast<const uint8_t*>(flat.words.data());
      bytes->assign(begin, begin + flat.words.size() * sizeof(int32_t));
      return absl::OkStatus();
    };
    ASSIGN_OR_RETURN(
        device_words,
        StageStepInput(absl::StrFormat("attention/%d/%d/%d/%d", list, params.window, a.heads,
                                       cache.block_size),
                       state.batch.words.data(), state.batch.words.size() * sizeof(int32_t),
                       "Attention batch", recipe));
  } else {
    ASSIGN_OR_RETURN(device_words,
                     StageToDevice(state.batch_upload, state.batch.words.data(),
                                   state.batch.words.size() * sizeof(int32_t), "Attention batch"));
  }
  const int32_t* words = static_cast<const int32_t*>(device_words);
  a.rows = reinterpret_cast<const kernels::PagedAttentionCudaRow*>(words);
  a.block_tables = words + state.batch.tables_offset;
  // The head gate in the combine kernel: the split count is part of a recorded step (its recipe
  // aborts when it changes), so a replay keeps the gate where it was recorded.
  kernels::RmsNormQ8Outputs q8;
  bool gated = false;
  if (gate.gate_logits != nullptr && kernels::PagedAttentionCudaCombineGates(a) &&
      gate.head_dim == cache.head_dim) {
    ASSIGN_OR_RETURN(const kernels::HeadGateArgs g,
                     HeadGateOpArgs(out, *gate.gate_logits, gate.head_dim));
    ASSIGN_OR_RETURN(
        q8, FusedQ8Outputs(g.heads * g.head_dim, g.rows, kernels::HeadGateQ8CudaSupports(g)));
    a.gate = g.gate;
    a.gate_stride = g.gate_stride;
    a.q8_natural = q8.natural;
    a.q8_pair = q8.pair;
    a.q8_rows = g.rows;
    gated = true;
  }
  RETURN_IF_ERROR(KernelResult(kernels::PagedAttentionCuda(a, stream()), "Attention"));
  if (q8.natural != nullptr) RememberPrequantized(out, q8);
  return gated;
}

}  // namespace stepserve
