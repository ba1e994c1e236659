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
#include <optional>
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

// RopeAppendAttention as one kernel at decode (PagedAttentionCudaArgs::rope) when
// STEPSERVE_ROPE_IN_ATTENTION=1 (read once). The same floats and cache bytes as the rope-and-append
// kernel followed by the attention (attention_rope_cuda_test and model_cuda_test pass with it on
// the H100), but off: slower as written (H100, 24 layers, session 34, two rounds, ms per step at
// 1 / 2 / 4 / 8 / 16 streams: 2.442 / 3.419 / 5.143 / 7.796 / 11.254 and 2.420 / 3.404 / 5.138 /
// 7.791 / 11.231 against 2.398 / 3.238 / 5.033 / 7.783 / 11.217 and 2.373 / 3.207 / 4.998 / 7.768
// / 11.257). Its attention launch adds 18.1 us to a batch-1 step where the plain one and the rope
// kernel added 11.6 + 2.6: the CTAs start only ~1 us before the GEMV ends (its CTAs hold the SMs),
// so the page-table and first-chunk round trips before the wait are not hidden, and after it each
// warp normalised its 1-4 query heads (and one warp the key and value) one after another, a
// dependent L2 round trip each (docs/cuda-engine.md, session 34). With all of a warp's rows loaded
// in one batch and the new key's slot offset before the wait (RopeRows, call 5): batch 1 on par
// (2.333 / 2.337 against 2.338 / 2.329 ms), 2 / 4 / 8 streams still 5.5 / 2 / 0.8% slower
// (3.399 / 3.414 against 3.232 / 3.218 at 2), 16 on par; the launch adds 12.6 us to a
// sliding-window layer where the plain attention and the rope kernel add 9.4 + 2.6. The third
// form (the first chunk's K / V loaded after the wait beside the rows; session 35, two rounds):
// batch 1 on par (2.334 / 2.354 against 2.335 / 2.336), 2 / 4 streams 4.2-5.8 / 1.4-2.6% slower
// (3.370 / 3.400 against 3.234 / 3.214 at 2); at batch 1 only it measured 2.361 ms.
bool RopeInAttention() {
  static const bool on = kernels::EnvSwitchSet("STEPSERVE_ROPE_IN_ATTENTION");
  return on;
}

// Plain decode: every sequence has at most one row in the batch, at its newest position - so the
// attention kernel may append each row's K / V itself, no row reading another row's new key.
bool OneNewRowPerSequence(const AttentionBatch& batch) {
  for (const SequenceSlice& seq : batch.seqs) {
    if (seq.q_count == 0) continue;
    if (seq.q_count != 1 || seq.q_begin < 0 ||
        seq.q_begin >= static_cast<int64_t>(batch.positions.size()) ||
        batch.positions[seq.q_begin] != seq.context_len - 1) {
      return false;
    }
  }
  return true;
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

std::optional<kernels::PagedAttentionCudaRope> CudaBackend::RopeInAttentionArgs(
    const TensorView& q, const TensorView& k, const TensorView& v, const QkNormRopeParams& rope,
    const AttentionBatch& batch, const KvCacheView& cache) {
  const int64_t tokens = static_cast<int64_t>(batch.positions.size());
  if (!RopeInAttention() || tokens == 0 || k.data == nullptr || !OneNewRowPerSequence(batch)) {
    return std::nullopt;
  }
  // Anything unusual goes the two-kernel way, whose checks word the errors.
  if (!CheckQkNormRope(q, k, rope, tokens).ok() || !CheckF32(v, "Attention", "v").ok() ||
      rope.head_dim != cache.head_dim || k.cols() != cache.kv_heads * cache.head_dim ||
      !CheckShape(v, k.cols(), tokens, "Attention", "v").ok()) {
    return std::nullopt;
  }
  for (const int32_t position : batch.positions) {
    if (position < 0) return std::nullopt;
  }
  kernels::PagedAttentionCudaRope r;
  r.k = k.f32();
  r.k_stride = k.stride_floats();
  r.v = v.f32();
  r.v_stride = v.stride_floats();
  r.q_norm = static_cast<const float*>(rope.q_norm.data);
  r.k_norm = static_cast<const float*>(rope.k_norm.data);
  r.freq_factors = rope.freq_factors.empty() ? nullptr : rope.freq_factors.data();
  r.eps = rope.eps;
  r.n_rot = rope.n_rot;
  r.base = rope.base;
  kernels::PagedAttentionCudaArgs check;
  check.kv = cache;
  check.rope = &r;
  if (!kernels::PagedAttentionCudaRopeApplies(check)) return std::nullopt;
  return r;
}

absl::Status CudaBackend::RopeAppendAttention(const TensorView& q, const TensorView& k,
                                              const TensorView& v, const QkNormRopeParams& rope,
                                              const AttentionBatch& batch, const KvCacheView& cache,
                                              const AttentionParams& params,
                                              const TensorView* gate_logits, int64_t head_dim,
                                              const TensorView& out) {
  const std::optional<kernels::PagedAttentionCudaRope> r =
      RopeInAttentionArgs(q, k, v, rope, batch, cache);
  if (!r.has_value()) {
    return Backend::RopeAppendAttention(q, k, v, rope, batch, cache, params, gate_logits, head_dim,
                                        out);
  }
  const TensorView* gate = gate_logits != nullptr && GateInCombine() ? gate_logits : nullptr;
  ASSIGN_OR_RETURN(const bool gated,
                   RunAttention(q, batch, cache, params, out, {gate, head_dim}, &*r));
  if (gate_logits == nullptr || gated) return absl::OkStatus();
  return HeadGate(out, *gate_logits, head_dim);
}

absl::StatusOr<bool> CudaBackend::RunAttention(const TensorView& q, const AttentionBatch& batch,
                                               const KvCacheView& cache,
                                               const AttentionParams& params, const TensorView& out,
                                               GateRequest gate,
                                               const kernels::PagedAttentionCudaRope* rope) {
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
  a.rope = rope;
  if (rope == nullptr && !recording_step() && !exact_activations_ &&
      kernels::PrefillAttentionCudaEnabled() && kernels::PrefillAttentionCudaSupports(cache) &&
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
    const bool with_rope = rope != nullptr;
    auto recipe = [q, cache, params, out, list, splits, sm_count, with_rope](
                      const StepDescription& next, std::vector<uint8_t>* bytes) {
      std::vector<kernels::AttentionSeq> seqs;
      const AttentionBatch next_batch{next.positions, next.seq_lists[list]};
      // The recorded kernel appends each row's K / V itself: only right for plain decode rows.
      if (with_rope && !OneNewRowPerSequence(next_batch)) {
        return absl::AbortedError("Attention: the step is not plain decode (rope in attention)");
      }
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
