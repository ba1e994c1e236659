// CudaBackend ops: Matmul, Embed, MoeExperts.
//
// Matmul picks one of three kernel paths by batch size and weight type:
//   rows <= 16 and a type the fast GEMV has (Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS): GemvCuda, int8
//       activations (kQ8; ~6e-3 relative to the exact result, matmul_cuda.h); IQ4_XS up to 32
//       rows (kernels::GemvCudaMaxRows);
//   rows <= 16, any other type: GemvGenericCuda (weights dequantized in registers, exact F32);
//   more rows: CublasGemm (cuBLAS, F32 accumulation; F32/BF16 weights exact, F16 and quantized
//       weights through F16 tiles, ~5e-4 relative); up to 64 rows in the types of the grouped
//       F16 GEMM (IQ4_XS, Q4_K, Q6_K) take that GEMM instead - the weights read in place - as one
//       slot, or split over K for narrow matrices (RunDenseGrouped; STEPSERVE_DENSE_GROUPED_F16).
// MoeExperts groups the (token, slot) pairs by expert on the host and runs gate/up/down of every
// active expert through the same Matmul paths on contiguous gathered rows.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/dense_grouped_matmul.h"
#include "engine/backend/op_checks.h"
#include "engine/base/status_macros.h"
#include "engine/quant/ggml_type.h"
#include "kernels/common/env_switch.h"
#include "kernels/elementwise/elementwise_cuda.h"
#include "kernels/embed/embed_cuda.h"
#include "kernels/matmul/cublas_loader.h"
#include "kernels/matmul/dequant_cuda.h"
#include "kernels/matmul/gemm_cuda.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_cuda.h"
#include "kernels/matmul/moe_gemv_cuda.h"
#include "kernels/moe/moe_cuda.h"

namespace stepserve {

struct CudaBackend::MatmulState {
  kernels::CublasGemm cublas;
  Scratch gemv_q8;               // int8 activations of the fast GEMV
  Scratch gemv_q8_side;          // those of side-stream GEMVs (ConcurrentMatmuls, BeginSide)
  Scratch gemm;                  // F16 copy of X + one dequantized weight tile
  Scratch embed_ids;             // token ids uploaded for Embed
  Scratch moe_rows;              // per grouped pair: gathered x, gate (then z), up, down output
  Scratch moe_index;             // slot -> token row, pair -> slot
  std::vector<int32_t> moe_ids;  // host copy of the router's ids
  std::vector<int32_t> moe_index_host;
  kernels::MoeGroups moe_groups;
  Scratch moe_gemv_workspace;  // MoeGemvCuda's intermediates (fast decode path)
  Scratch moe_counters;        // MoeGemvCuda's arrival counters: zeroed when allocated
  Scratch dense_index;         // RunDenseGrouped's groupings (dense_grouped_matmul.cc)
  Scratch dense_parts;         // RunDenseGrouped's partial products of a K-split
  // A side stream's dense grouped GEMM (ConcurrentMatmuls' side jobs): its own partial products
  // and F16 copy of X, so that the main line's survive (the groupings are read only).
  Scratch dense_parts_side;
  Scratch gemm_side;
};

namespace {

using MatmulState = CudaBackend::MatmulState;

// A kernel argument struct (GemvCudaArgs, MatmulCudaArgs) with the operands of `m` filled in.
template <class KernelArgs>
KernelArgs WithOperands(const kernels::MatmulArgs& m) {
  KernelArgs a;
  a.type = m.type;
  a.w = m.w;
  a.w_row_bytes = m.w_row_bytes;
  a.in = m.in;
  a.out = m.out;
  a.x = m.x;
  a.x_stride = m.x_stride;
  a.rows = m.rows;
  a.y = m.y;
  a.y_stride = m.y_stride;
  return a;
}

// The fast GEMV's arguments for `m`, scratch left to the caller.
kernels::GemvCudaArgs GemvArgsOf(const kernels::MatmulArgs& m,
                                 kernels::GemvCudaActivations activations) {
  kernels::GemvCudaArgs g = WithOperands<kernels::GemvCudaArgs>(m);
  g.activations = activations;
  return g;
}

// The int8 activations of a kQ8 GEMV: `x_q8` where a norm already wrote them (read only), else
// quantized by the GEMV into `scratch` (grown as needed).
absl::Status SetGemvActivations(CudaBackend& backend, kernels::GemvCudaArgs& g, const void* x_q8,
                                CudaBackend::Scratch& scratch, const char* op) {
  const int64_t bytes = kernels::GemvCudaScratchBytes(g.in, g.rows);
  if (x_q8 != nullptr) {
    g.scratch = const_cast<void*>(x_q8);
    g.scratch_bytes = bytes;
    g.x_prequantized = true;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(g.scratch, backend.EnsureScratch(scratch, bytes, op));
  g.scratch_bytes = static_cast<int64_t>(scratch.bytes);
  return absl::OkStatus();
}

// RunDenseGrouped's areas: the side stream's own parts and X copy between BeginSide / EndSide.
DenseGroupedScratch DenseScratchOf(CudaBackend& backend, MatmulState& state) {
  return backend.in_side()
             ? DenseGroupedScratch{state.dense_index, state.dense_parts_side, state.gemm_side}
             : DenseGroupedScratch{state.dense_index, state.dense_parts, state.gemm};
}

// y = x W^T with every pointer of `m` in device memory. `exact_activations`: small batches use
// exact F32 activations instead of the fast GEMV's int8 ones (see MoeExperts). `x_q8`: x's int8
// activations in the weight type's order, already written (fused quantization), or nullptr.
absl::Status RunMatmul(CudaBackend& backend, MatmulState& state, const kernels::MatmulArgs& m,
                       bool exact_activations, const char* op, const void* x_q8 = nullptr) {
  if (m.rows == 0) return absl::OkStatus();
  const auto activations =
      exact_activations ? kernels::GemvCudaActivations::kF32 : kernels::GemvCudaActivations::kQ8;
  // From DenseGroupedMinRows (IQ4_XS 17, the K-quants 9 rows; DenseGroupedTakesRows) the dense
  // grouped GEMM is tried ahead of the GEMVs; below it (other types: past the GEMVs) after them,
  // further down - once either way.
  const bool dense_first = !exact_activations && DenseGroupedTakesRows(m);
  if (dense_first) {
    ASSIGN_OR_RETURN(const bool done,
                     RunDenseGrouped(backend, DenseScratchOf(backend, state), m, op));
    if (done) return absl::OkStatus();
  }
  if (m.rows <= kernels::GemvCudaMaxRows(m.type, activations) &&
      kernels::GemvCudaSupports(m.type)) {
    kernels::GemvCudaArgs g = GemvArgsOf(m, activations);  // kF32 needs no scratch
    if (!exact_activations) {
      // A side branch quantizes into its own scratch: the main line may still read the other.
      RETURN_IF_ERROR(SetGemvActivations(
          backend, g, x_q8, backend.in_side() ? state.gemv_q8_side : state.gemv_q8, op));
    }
    // The fast kernels need 16-byte aligned rows; any other layout takes the generic path.
    if (kernels::ValidateGemvCuda(g) == kernels::KernelStatus::kOk) {
      return backend.KernelResult(kernels::GemvCuda(g, backend.stream()), op);
    }
  }
  kernels::MatmulCudaArgs a = WithOperands<kernels::MatmulCudaArgs>(m);
  if (m.rows <= kernels::kGemvGenericMaxRows) {
    return backend.KernelResult(kernels::GemvGenericCuda(a, backend.stream()), op);
  }
  if (!exact_activations && !dense_first) {
    ASSIGN_OR_RETURN(const bool done,
                     RunDenseGrouped(backend, DenseScratchOf(backend, state), m, op));
    if (done) return absl::OkStatus();
  }
  a.exact = exact_activations;
  if (std::string error; kernels::LoadCublas(&error) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: %d rows need the cuBLAS GEMM path: %s (set STEPSERVE_CUBLAS to the "
                        "library's path)",
                        op, m.rows, error));
  }
  const int64_t bytes =
      kernels::CublasGemmScratchBytes(m.type, m.in, m.out, m.rows, exact_activations);
  if (bytes > 0) {
    ASSIGN_OR_RETURN(a.scratch, backend.EnsureScratch(state.gemm, bytes, op));
    a.scratch_bytes = static_cast<int64_t>(state.gemm.bytes);
  }
  return backend.KernelResult(state.cublas.Run(a, backend.stream()), op);
}

absl::Status CheckDeviceWeight(const WeightView& w, const char* op, const char* operand) {
  if (w.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s has no data", op, operand));
  }
  if (!kernels::DequantCudaSupports(w.type)) {
    return absl::UnimplementedError(
        absl::StrFormat("%s: %s has type %s, which the cuda backend "
                        "cannot dequantize",
                        op, operand, GgmlTypeName(w.type)));
  }
  const int64_t need = RowBytes(w.type, w.ne[0]);
  if (need < 0 || w.row_bytes() < need) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s rows of %d %s values need %d bytes, stride is %d", op, operand,
                        w.ne[0], GgmlTypeName(w.type), need, w.row_bytes()));
  }
  return absl::OkStatus();
}

// Expert e of a 3-D expert tensor as a 2-D weight.
WeightView ExpertMatrix(const WeightView& w, int64_t e) {
  WeightView m = w;
  m.data = static_cast<const uint8_t*>(w.data) + e * w.row_bytes() * w.ne[1];
  m.ne[2] = 1;
  m.ne[3] = 1;
  return m;
}

}  // namespace

absl::Status CudaBackend::Matmul(const TensorView& x, const WeightView& w, const TensorView& y) {
  ForgetPrequantizedIfWritten(y);
  ASSIGN_OR_RETURN(const kernels::MatmulArgs m, MatmulOpArgs(x, w, y));
  RETURN_IF_ERROR(CheckDeviceWeight(w, "Matmul", "weight"));
  if (!matmul_) matmul_ = std::make_shared<MatmulState>();
  const void* x_q8 = exact_activations_ || !kernels::GemvCudaSupports(w.type)
                         ? nullptr
                         : PrequantizedFor(x, kernels::Q8ScratchPosition(w.type, 1) != 1);
  prequantized_uses_ += x_q8 != nullptr;
  return RunMatmul(*this, *matmul_, m, exact_activations_, "Matmul", x_q8);
}

namespace {

// STEPSERVE_SIDE_DENSE_MATMULS=1 (read once; off until measured): ConcurrentMatmuls runs a side
// job that takes the dense grouped GEMM (the Q5_K attention `v` projection at 9-16 rows) on the
// side stream instead of running every job in order. Why: at 16 streams (H100, session 37
// timeline) that projection's F16 conversion, GEMM and sum of parts add ~9.8 us a layer after the
// q / k / gate GEMV.
bool SideDenseMatmuls() {
  static const bool on = kernels::EnvSwitchSet("STEPSERVE_SIDE_DENSE_MATMULS");
  return on;
}

}  // namespace

absl::Status CudaBackend::ConcurrentMatmuls(std::span<const MatmulJob> jobs) {
  constexpr size_t kMaxJobs = 8;
  if (!concurrent_matmuls_ || exact_activations_ || in_side_ || side_pending_ || jobs.size() < 2 ||
      jobs.size() > kMaxJobs) {
    return Backend::ConcurrentMatmuls(jobs);
  }
  if (!matmul_) matmul_ = std::make_shared<MatmulState>();
  MatmulState& state = *matmul_;
  // The jobs are independent: no output is another job's input, so every output's prequantized
  // form can be dropped before any input's is looked up (Matmul does both per call).
  for (const MatmulJob& job : jobs) ForgetPrequantizedIfWritten(job.y);
  kernels::GemvCudaArgs gemv[kMaxJobs];
  kernels::MatmulArgs dense[kMaxJobs];
  bool dense_side[kMaxJobs] = {};
  for (size_t i = 0; i < jobs.size(); ++i) {
    const MatmulJob& job = jobs[i];
    ASSIGN_OR_RETURN(const kernels::MatmulArgs m, MatmulOpArgs(job.x, job.w, job.y));
    RETURN_IF_ERROR(CheckDeviceWeight(job.w, "Matmul", "weight"));
    const auto q8 = kernels::GemvCudaActivations::kQ8;
    // One-launch GEMVs run side by side; with STEPSERVE_SIDE_DENSE_MATMULS a side job may also
    // take the dense grouped GEMM, on the side's own scratch (DenseScratchOf), if a GEMV could
    // take it too (its fallback while a step is recorded). Other paths share scratch areas
    // (cuBLAS's F16 tiles) that two streams must not write at once.
    if (m.rows < 1 || !kernels::GemvCudaSupports(m.type) ||
        m.rows > kernels::GemvCudaMaxRows(m.type, q8)) {
      return Backend::ConcurrentMatmuls(jobs);
    }
    if (DenseGroupedTakesRows(m)) {
      if (i == 0 || !SideDenseMatmuls()) return Backend::ConcurrentMatmuls(jobs);
      dense[i] = m;
      dense_side[i] = true;
      continue;
    }
    gemv[i] = GemvArgsOf(m, q8);
    // Job 0 quantizes where Matmul does; the side jobs (one after another on the side stream)
    // into a scratch of their own.
    RETURN_IF_ERROR(SetGemvActivations(
        *this, gemv[i], PrequantizedFor(job.x, kernels::Q8ScratchPosition(m.type, 1) != 1),
        i == 0 ? state.gemv_q8 : state.gemv_q8_side, "Matmul"));
    if (kernels::ValidateGemvCuda(gemv[i]) != kernels::KernelStatus::kOk) {
      return Backend::ConcurrentMatmuls(jobs);  // a layout only the generic path takes
    }
  }
  for (size_t i = 0; i < jobs.size(); ++i)
    prequantized_uses_ += !dense_side[i] && gemv[i].x_prequantized;
  RETURN_IF_ERROR(EnsureSideStream());
  // Fork: the side stream starts after everything enqueued so far (in a recorded step it joins
  // the capture through the event).
  RETURN_IF_ERROR(CudaResult(cudaEventRecord(side_fork_, stream_), "ConcurrentMatmuls: fork"));
  RETURN_IF_ERROR(
      CudaResult(cudaStreamWaitEvent(side_stream_, side_fork_, 0), "ConcurrentMatmuls: fork"));
  absl::Status side = absl::OkStatus();
  for (size_t i = 1; i < jobs.size() && side.ok(); ++i) {
    if (dense_side[i]) {
      // The backend's side mode for the one call: its launches go to the side stream and it
      // picks the side's scratch areas.
      // As Matmul: the norm's int8 activations where it wrote them (read only here), for a GEMV
      // fallback.
      const void* x_q8 =
          PrequantizedFor(jobs[i].x, kernels::Q8ScratchPosition(dense[i].type, 1) != 1);
      prequantized_uses_ += x_q8 != nullptr;
      std::swap(stream_, side_stream_);
      in_side_ = true;
      side = RunMatmul(*this, state, dense[i], /*exact_activations=*/false, "Matmul (side stream)",
                       x_q8);
      in_side_ = false;
      std::swap(stream_, side_stream_);
    } else {
      side = KernelResult(kernels::GemvCuda(gemv[i], side_stream_), "Matmul (side stream)");
    }
  }
  // Join whatever happened, so that the stream (and a capture) never leaves the side work behind.
  absl::Status join = CudaResult(cudaEventRecord(side_join_, side_stream_), "ConcurrentMatmuls");
  absl::Status main = KernelResult(kernels::GemvCuda(gemv[0], stream_), "Matmul");
  if (join.ok()) {
    join = CudaResult(cudaStreamWaitEvent(stream_, side_join_, 0), "ConcurrentMatmuls: join");
  }
  RETURN_IF_ERROR(side);
  RETURN_IF_ERROR(main);
  return join;
}

absl::Status CudaBackend::Embed(const WeightView& table, std::span<const int32_t> ids,
                                const TensorView& out) {
  ForgetPrequantized();
  ASSIGN_OR_RETURN(const kernels::EmbedArgs args, EmbedOpArgs(table, ids, out));
  const int64_t n = args.n_ids;
  RETURN_IF_ERROR(CheckDeviceWeight(table, "Embed", "table"));
  const int64_t n_vocab = args.n_vocab;
  // The ids are host memory: check them here, before anything is enqueued.
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab) {
      return absl::OutOfRangeError(
          absl::StrFormat("Embed: token id %d (position %d) is outside the vocabulary [0, %d)",
                          ids[i], i, n_vocab));
    }
  }
  if (n == 0) return absl::OkStatus();
  if (!matmul_) matmul_ = std::make_shared<MatmulState>();
  void* device_ids = nullptr;
  if (recording_step()) {
    const StepDescription& step = recording_description();
    if (ids.data() != step.ids.data() || ids.size() != step.ids.size()) {
      return AbandonRecording("Embed ids are not the step's");
    }
    auto recipe = [n_vocab](const StepDescription& next, std::vector<uint8_t>* bytes) {
      for (const int32_t id : next.ids) {
        if (id < 0 || id >= n_vocab) {
          return absl::OutOfRangeError(
              absl::StrFormat("Embed: token id %d is outside the vocabulary [0, %d)", id, n_vocab));
        }
      }
      const auto* begin = reinterpret_cast<const uint8_t*>(next.ids.data());
      bytes->assign(begin, begin + next.ids.size_bytes());
      return absl::OkStatus();
    };
    ASSIGN_OR_RETURN(device_ids,
                     StageStepInput("ids", ids.data(), ids.size_bytes(), "Embed ids", recipe));
  } else {
    ASSIGN_OR_RETURN(device_ids,
                     StageToDevice(matmul_->embed_ids, ids.data(), ids.size_bytes(), "Embed ids"));
  }
  kernels::EmbedCudaArgs a;
  a.type = args.type;
  a.table = args.table;
  a.row_bytes = args.row_bytes;
  a.n_vocab = n_vocab;
  a.dim = args.dim;
  a.ids = static_cast<const int32_t*>(device_ids);
  a.n_ids = n;
  a.out = args.out;
  a.out_stride = args.out_stride;
  return KernelResult(kernels::EmbedCuda(a, stream_), "Embed");
}

// Decode sizes (fast mode): MoeGemvCuda reads the router's ids on the device - six launches, no
// host round trip, capturable in a CUDA graph. Ids come from RouterTopK on this device and are
// always in range; an id that is not would give a zero contribution (the kernel's guard), which
// is why the host path below, not this one, is what exact mode and the tests of bad ids use.
absl::Status CudaBackend::MoeExpertsOnDevice(const TensorView& x, const ExpertWeights& e,
                                             std::span<const int32_t> ids,
                                             std::span<const float> weights, int64_t top_k,
                                             const TensorView& y,
                                             const SharedExpertWeights* shared) {
  MatmulState& s = *matmul_;
  kernels::MoeGemvCudaArgs a;
  a.x = x.f32();
  a.x_stride = x.stride_floats();
  a.tokens = x.rows();
  a.n_embd = x.cols();
  a.n_ff = e.gate.ne[1];
  a.n_experts = e.gate.ne[2];
  a.ids = ids.data();
  a.weights = weights.data();
  a.top_k = top_k;
  const auto matrix = [](const WeightView& w) {
    return kernels::ExpertMatrixCuda{w.type, w.data, w.row_bytes(), w.row_bytes() * w.ne[1]};
  };
  a.gate = matrix(e.gate);
  a.up = matrix(e.up);
  a.down = matrix(e.down);
  a.limit = e.limit;
  a.y = y.f32();
  a.y_stride = y.stride_floats();
  if (shared != nullptr) {
    a.has_shared = true;
    a.shared_gate = {shared->gate.type, shared->gate.data, shared->gate.row_bytes(), 0};
    a.shared_up = {shared->up.type, shared->up.data, shared->up.row_bytes(), 0};
    a.shared_down = {shared->down.type, shared->down.data, shared->down.row_bytes(), 0};
    a.shared_limit = shared->limit;
  }
  // The shared expert is one more expert row of the one-token path.
  const int64_t slots = top_k + (shared != nullptr ? 1 : 0);
  a.workspace_bytes = kernels::MoeGemvCudaWorkspaceBytes(a.tokens, slots, a.n_embd, a.n_ff);
  a.x_q8 = PrequantizedFor(x, kernels::Q8ScratchPosition(e.gate.type, 1) != 1);
  a.fuse_down_quantization = CudaFusedQuantization();
  prequantized_uses_ += a.x_q8 != nullptr;
  ASSIGN_OR_RETURN(a.workspace,
                   EnsureScratch(s.moe_gemv_workspace, static_cast<size_t>(a.workspace_bytes),
                                 "MoeExperts workspace"));
  // A few tokens take MoeGemvCuda's two-kernel path, whose counters must start at zero; every
  // call leaves them zero, so only a new allocation needs the memset.
  const int64_t counters = kernels::MoeGemvCudaCounterInts(a.tokens, slots, a.n_ff);
  if (a.tokens <= kernels::kMoeGemvFusedMaxTokens && counters > 0) {
    const bool fresh = s.moe_counters.bytes < static_cast<size_t>(counters) * sizeof(int32_t) ||
                       s.moe_counters.data == nullptr;
    ASSIGN_OR_RETURN(void* data, EnsureScratch(s.moe_counters, counters * sizeof(int32_t),
                                               "MoeExperts counters"));
    if (fresh) {
      RETURN_IF_ERROR(CudaResult(cudaMemsetAsync(data, 0, s.moe_counters.bytes, stream_),
                                 "MoeExperts counters"));
    }
    a.counters = static_cast<int32_t*>(data);
  }
  return KernelResult(kernels::MoeGemvCuda(a, stream_), "MoeExperts (device)");
}

absl::StatusOr<bool> CudaBackend::MoeExpertsWithShared(const TensorView& x, const ExpertWeights& e,
                                                       const SharedExpertWeights& shared,
                                                       std::span<const int32_t> ids,
                                                       std::span<const float> weights,
                                                       int64_t top_k, const TensorView& y) {
  const int64_t n_ff = e.gate.ne[1];
  const auto same_shape = [](const WeightView& w, int64_t in, int64_t out) {
    return w.ne[0] == in && w.ne[1] == out && w.ne[2] == 1;
  };
  if (exact_activations_ || x.rows() < 1 || x.rows() > kernels::kMoeGemvFusedMaxTokens ||
      e.up.type != e.gate.type || !kernels::MoeGemvCudaSupports(e.gate.type, e.down.type) ||
      !kernels::MoeGemvCudaTakesShared(e.gate.type, e.down.type, x.rows(), n_ff) ||
      shared.gate.type != e.gate.type || shared.up.type != e.gate.type ||
      shared.down.type != e.down.type || !same_shape(shared.gate, x.cols(), n_ff) ||
      !same_shape(shared.up, x.cols(), n_ff) || !same_shape(shared.down, n_ff, x.cols()) ||
      shared.gate.row_bytes() % 16 != 0 || shared.up.row_bytes() % 16 != 0 ||
      shared.down.row_bytes() % 16 != 0) {
    return false;
  }
  ForgetPrequantizedIfWritten(y);
  // The checks MoeExperts makes (shapes, ids / weights spans, device weights).
  RETURN_IF_ERROR(MoeExpertsOpArgs(x, e, ids, weights, top_k, y).status());
  RETURN_IF_ERROR(CheckDeviceWeight(e.gate, "MoeExperts", "gate"));
  RETURN_IF_ERROR(CheckDeviceWeight(e.up, "MoeExperts", "up"));
  RETURN_IF_ERROR(CheckDeviceWeight(e.down, "MoeExperts", "down"));
  RETURN_IF_ERROR(CheckDeviceWeight(shared.gate, "MoeExperts", "shared gate"));
  RETURN_IF_ERROR(CheckDeviceWeight(shared.up, "MoeExperts", "shared up"));
  RETURN_IF_ERROR(CheckDeviceWeight(shared.down, "MoeExperts", "shared down"));
  if (!matmul_) matmul_ = std::make_shared<MatmulState>();
  RETURN_IF_ERROR(MoeExpertsOnDevice(x, e, ids, weights, top_k, y, &shared));
  return true;
}

// Expert matmuls of up to 16 rows use exact F32 activations: the fast GEMV's int8 activations
// (~5e-3 relative per product) compound through gate/up -> SwiGLU -> down to ~1.1e-2 relative on
// the layer output (simulated on random data), too coarse for a whole FFN. The int8 decode path
// for MoE is MoeGemvCuda (kernels/matmul/moe_gemv_cuda.h).
//
// The router's ids come back to the host (one small download, which waits for the stream) so
// the pairs can be grouped by expert and each active expert runs as an ordinary matmul on its
// gathered rows. Next step: a single grouped kernel that reads the ids on the device (no host
// round trip, capturable in a CUDA graph), e.g. the indexed decode GEMV for few tokens and a
// grouped tensor-core GEMM for prefill.
absl::Status CudaBackend::MoeExperts(const TensorView& x, const ExpertWeights& e,
                                     std::span<const int32_t> ids, std::span<const float> weights,
                                     int64_t top_k, const TensorView& y) {
  ForgetPrequantizedIfWritten(y);
  ASSIGN_OR_RETURN(const kernels::MoeExpertsArgs args,
                   MoeExpertsOpArgs(x, e, ids, weights, top_k, y));
  const int64_t d = args.n_embd;
  const int64_t ff = args.n_ff;
  const int64_t n_exp = args.n_experts;
  const int64_t tokens = args.rows;
  const int64_t pairs = tokens * top_k;
  RETURN_IF_ERROR(CheckDeviceWeight(e.gate, "MoeExperts", "gate"));
  RETURN_IF_ERROR(CheckDeviceWeight(e.up, "MoeExperts", "up"));
  RETURN_IF_ERROR(CheckDeviceWeight(e.down, "MoeExperts", "down"));
  if (tokens == 0) return absl::OkStatus();
  if (!matmul_) matmul_ = std::make_shared<MatmulState>();
  MatmulState& s = *matmul_;
  // Prefill chunks of IQ4_XS experts stay on the device too (grouped tensor-core GEMV): the host
  // path below cost ~24 ms per MoE layer for 2048 tokens (45-layer prefill 1.5 s vs 21 ms for
  // the two dense layers alone, H200), one dequantize + cuBLAS call per expert and projection.
  const bool many_on_device = kernels::MoeGemvCudaSupportsManyTokens(e.gate.type, e.down.type) &&
                              pairs <= kernels::kMoeGemvMaxPairsMany;
  if (!exact_activations_ && (tokens <= kernels::kMoeGemvMaxTokens || many_on_device) &&
      kernels::MoeGemvCudaSupports(e.gate.type, e.down.type) && e.up.type == e.gate.type) {
    return MoeExpertsOnDevice(x, e, ids, weights, top_k, y);
  }

  // 1. Ids to the host (waits for the router), validated and grouped by expert.
  s.moe_ids.resize(pairs);
  RETURN_IF_ERROR(Download(ids.data(), s.moe_ids.data(), ids.size_bytes()));
  kernels::MoeGroups& groups = s.moe_groups;
  const kernels::KernelStatus planned =
      kernels::PlanMoeGroups(s.moe_ids.data(), tokens, top_k, n_exp, &groups);
  if (planned == kernels::KernelStatus::kOutOfRange) {
    const int64_t p = groups.bad_pair;
    return absl::OutOfRangeError(
        absl::StrFormat("MoeExperts: expert id %d (token %d, slot %d) is outside [0, %d)",
                        s.moe_ids[p], p / top_k, p % top_k, n_exp));
  }
  RETURN_IF_ERROR(KernelResult(planned, "MoeExperts (grouping)"));
  s.moe_index_host.assign(groups.slot_token.begin(), groups.slot_token.end());
  s.moe_index_host.insert(s.moe_index_host.end(), groups.pair_slot.begin(), groups.pair_slot.end());
  ASSIGN_OR_RETURN(void* index_dev,
                   StageToDevice(s.moe_index, s.moe_index_host.data(),
                                 s.moe_index_host.size() * sizeof(int32_t), "MoeExperts index"));
  const int32_t* slot_token = static_cast<const int32_t*>(index_dev);
  const int32_t* pair_slot = slot_token + pairs;

  // 2. Per grouped slot: gathered x [d], gate -> z [ff], up [ff], down output [d].
  const int64_t row_floats = 2 * d + 2 * ff;
  ASSIGN_OR_RETURN(
      void* rows_dev,
      EnsureScratch(s.moe_rows, static_cast<size_t>(pairs * row_floats) * 4, "MoeExperts rows"));
  float* xg = static_cast<float*>(rows_dev);
  float* gate = xg + pairs * d;
  float* up = gate + pairs * ff;
  float* down = up + pairs * ff;
  RETURN_IF_ERROR(KernelResult(
      kernels::GatherRowsCuda(x.f32(), x.stride_floats(), slot_token, pairs, d, xg, d, stream_),
      "MoeExperts (gather)"));

  auto expert_matmul = [&](const WeightView& w, int64_t expert, const float* in_rows,
                           float* out_rows, const char* op) {
    const int64_t begin = groups.offsets[expert];
    const WeightView m = ExpertMatrix(w, expert);
    kernels::MatmulArgs mm;
    mm.type = m.type;
    mm.w = m.data;
    mm.w_row_bytes = m.row_bytes();
    mm.in = m.ne[0];
    mm.out = m.ne[1];
    mm.x = in_rows + begin * mm.in;
    mm.x_stride = mm.in;
    mm.rows = groups.offsets[expert + 1] - begin;
    mm.y = out_rows + begin * mm.out;
    mm.y_stride = mm.out;
    // An expert without tokens has rows == 0: a no-op.
    // Small groups: exact GEMV (int8 activations compound through the FFN, see above); large
    // groups: the GEMM, in F32 only in exact mode.
    const bool exact = exact_activations_ || mm.rows <= kernels::kGemvCudaMaxRows;
    return RunMatmul(*this, s, mm, exact, op);
  };
  for (int64_t ex = 0; ex < n_exp; ++ex) {
    RETURN_IF_ERROR(expert_matmul(e.gate, ex, xg, gate, "MoeExperts (gate)"));
    RETURN_IF_ERROR(expert_matmul(e.up, ex, xg, up, "MoeExperts (up)"));
  }
  kernels::SwiGluArgs swiglu;  // z written over the gate outputs
  swiglu.g = gate;
  swiglu.g_stride = ff;
  swiglu.u = up;
  swiglu.u_stride = ff;
  swiglu.z = gate;
  swiglu.z_stride = ff;
  swiglu.rows = pairs;
  swiglu.n = ff;
  swiglu.limit = e.limit;
  RETURN_IF_ERROR(KernelResult(kernels::SwiGluCuda(swiglu, stream_), "MoeExperts (swiglu)"));
  for (int64_t ex = 0; ex < n_exp; ++ex) {
    RETURN_IF_ERROR(expert_matmul(e.down, ex, gate, down, "MoeExperts (down)"));
  }
  // 3. y[t] += sum_k w[t][k] * down[slot of (t, k)], weights read on the device.
  return KernelResult(kernels::MoeScatterAddCuda(down, d, pair_slot, weights.data(), tokens, top_k,
                                                 d, y.f32(), y.stride_floats(), stream_),
                      "MoeExperts (scatter-add)");
}

}  // namespace stepserve
