// CudaBackend ops: RmsNorm, AddRmsNorm, QkNormRope, HeadGate, SwiGlu, Add, RouterTopK, LogitsTopK.
// Each checks its operands on the host with the CPU backend's checks and messages (op_checks.h),
// then enqueues one kernel on the backend's stream. Only QkNormRope has host-side data (the
// positions), which it stages into this group's scratch.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/op_checks.h"
#include "engine/base/status_macros.h"
#include "kernels/elementwise/elementwise_cuda.h"
#include "kernels/matmul/matmul_cuda.h"
#include "kernels/moe/router_cuda.h"
#include "kernels/rms_norm/rms_norm_cuda.h"
#include "kernels/rope/rope_cuda.h"
#include "kernels/sampling/logits_topk_cuda.h"

namespace stepserve {

using kernels::KernelStatus;

struct CudaBackend::PointwiseState {
  Scratch positions;      // QkNormRope's positions, uploaded per call
  Scratch topk;           // LogitsTopK's per-chunk candidates
  Scratch fused_q8;       // a norm's output as int8 GEMV activations, natural then pair order
  Scratch fused_q8_side;  // those written inside a side branch (CudaBackend::BeginSide)
};

namespace {

std::atomic<bool>& FusedQuantizationSetting() {
  static std::atomic<bool> enabled{[] {
    const char* v = std::getenv("STEPSERVE_FUSED_QUANT");
    return v == nullptr || v[0] != '0';
  }()};
  return enabled;
}

// Bytes of one order's area, rounded to 16 so the second area stays aligned.
int64_t FusedQ8AreaBytes(int64_t n, int64_t rows) {
  return (kernels::GemvCudaScratchBytes(n, rows) + 15) / 16 * 16;
}

}  // namespace

bool SetCudaFusedQuantization(bool enabled) { return FusedQuantizationSetting().exchange(enabled); }
bool CudaFusedQuantization() { return FusedQuantizationSetting().load(std::memory_order_relaxed); }

const void* CudaBackend::PrequantizedFor(const TensorView& x, bool pair_order) const {
  const PrequantizedX& p = prequantized_;
  if (p.x == nullptr || p.x != x.data || p.rows != x.rows() || p.cols != x.cols() ||
      p.stride != x.stride_floats()) {
    return nullptr;
  }
  return pair_order ? p.pair : p.natural;
}

void CudaBackend::ForgetPrequantizedIfWritten(const TensorView& y) {
  const PrequantizedX& p = prequantized_;
  if (p.x == nullptr || y.data == nullptr || y.rows() == 0) return;
  const auto* x_begin = reinterpret_cast<const uint8_t*>(p.x);
  const auto* x_end = x_begin + ((p.rows - 1) * p.stride + p.cols) * sizeof(float);
  const auto* y_begin = static_cast<const uint8_t*>(y.data);
  const auto* y_end = y_begin + ((y.rows() - 1) * y.stride_floats() + y.cols()) * sizeof(float);
  if (y_begin < x_end && x_begin < y_end) ForgetPrequantized();
}

absl::StatusOr<kernels::RmsNormQ8Outputs> CudaBackend::FusedQ8Outputs(int64_t n, int64_t rows,
                                                                      bool supported) {
  if (!CudaFusedQuantization() || exact_activations_ || !supported) {
    return kernels::RmsNormQ8Outputs{};
  }
  if (!pointwise_) pointwise_ = std::make_shared<PointwiseState>();
  const int64_t area = FusedQ8AreaBytes(n, rows);
  // Sized for the largest row count at once, so decode steps of 1..16 rows do not move it (a moved
  // scratch area invalidates the recorded step graphs); it grows with the widest output (the
  // attention output, 12288 values for Step-3.5) during the first, eager steps.
  const int64_t most = FusedQ8AreaBytes(n, kernels::kRmsNormQ8MaxRows);
  Scratch& scratch = in_side_ ? pointwise_->fused_q8_side : pointwise_->fused_q8;
  ASSIGN_OR_RETURN(void* base,
                   EnsureScratch(scratch, static_cast<size_t>(2 * most), "fused int8 activations"));
  return kernels::RmsNormQ8Outputs{base, static_cast<uint8_t*>(base) + area};
}

void CudaBackend::RememberPrequantized(const TensorView& out, const kernels::RmsNormQ8Outputs& q8) {
  prequantized_ = {out.f32(), out.rows(), out.cols(), out.stride_floats(), q8.natural, q8.pair};
}

absl::Status CudaBackend::RmsNorm(const TensorView& x, const WeightView& weight, float eps,
                                  const TensorView& out) {
  ForgetPrequantized();
  ASSIGN_OR_RETURN(const kernels::RmsNormArgs a, RmsNormOpArgs(x, weight, eps, out));
  ASSIGN_OR_RETURN(const kernels::RmsNormQ8Outputs q8,
                   FusedQ8Outputs(a.n, a.rows, kernels::RmsNormQ8CudaSupports(a)));
  if (q8.natural != nullptr) {
    RETURN_IF_ERROR(KernelResult(kernels::RmsNormQ8Cuda(a, q8, stream()), "RmsNorm"));
    RememberPrequantized(out, q8);
    return absl::OkStatus();
  }
  return KernelResult(kernels::RmsNormCuda(a, stream()), "RmsNorm");
}

absl::StatusOr<kernels::QkNormRopeCudaArgs> CudaBackend::QkNormRopeArgs(
    const TensorView& q, const TensorView& k, const QkNormRopeParams& p,
    std::span<const int32_t> positions) {
  const int64_t tokens = static_cast<int64_t>(positions.size());
  RETURN_IF_ERROR(CheckQkNormRope(q, k, p, tokens));
  for (const int32_t position : positions) {
    if (position < 0) return KernelResult(KernelStatus::kOutOfRange, "QkNormRope (rope)");
  }
  const int64_t dh = p.head_dim;
  kernels::QkNormRopeCudaArgs a;
  a.q = q.f32();
  a.q_stride = q.stride_floats();
  a.q_heads = q.cols() / dh;
  a.q_norm = static_cast<const float*>(p.q_norm.data);
  if (k.data != nullptr) {  // k is optional
    a.k = k.f32();
    a.k_stride = k.stride_floats();
    a.k_heads = k.cols() / dh;
    a.k_norm = static_cast<const float*>(p.k_norm.data);
  }
  a.tokens = tokens;
  a.head_dim = dh;
  a.eps = p.eps;
  a.n_rot = p.n_rot;
  a.base = p.base;
  a.freq_factors = p.freq_factors.empty() ? nullptr : p.freq_factors.data();
  // Checked before the positions are staged, so a rejected call enqueues nothing. The host
  // pointer stands in for the device copy (validation only checks it is set).
  a.positions = positions.data();
  if (KernelStatus s = kernels::ValidateQkNormRopeCuda(a); s != KernelStatus::kOk) {
    return KernelResult(s, "QkNormRope");
  }
  if (tokens == 0) return a;
  if (!pointwise_) pointwise_ = std::make_shared<PointwiseState>();
  void* staged = nullptr;
  if (recording_step()) {
    const StepDescription& step = recording_description();
    if (positions.data() != step.positions.data() || positions.size() != step.positions.size()) {
      return AbandonRecording("QkNormRope positions are not the step's");
    }
    ASSIGN_OR_RETURN(staged, StageStepInput("positions", positions.data(), positions.size_bytes(),
                                            "QkNormRope positions", StepPositionsRecipe));
  } else {
    ASSIGN_OR_RETURN(staged, StageToDevice(pointwise_->positions, positions.data(),
                                           positions.size_bytes(), "QkNormRope positions"));
  }
  a.positions = static_cast<const int32_t*>(staged);
  return a;
}

absl::Status CudaBackend::QkNormRope(const TensorView& q, const TensorView& k,
                                     const QkNormRopeParams& p,
                                     std::span<const int32_t> positions) {
  ForgetPrequantized();
  ASSIGN_OR_RETURN(const kernels::QkNormRopeCudaArgs a, QkNormRopeArgs(q, k, p, positions));
  if (a.tokens == 0) return absl::OkStatus();
  return KernelResult(kernels::QkNormRopeCuda(a, stream()), "QkNormRope");
}

absl::Status CudaBackend::HeadGate(const TensorView& o, const TensorView& gate_logits,
                                   int64_t head_dim) {
  ForgetPrequantized();
  ASSIGN_OR_RETURN(const kernels::HeadGateArgs a, HeadGateOpArgs(o, gate_logits, head_dim));
  ASSIGN_OR_RETURN(
      const kernels::RmsNormQ8Outputs q8,
      FusedQ8Outputs(a.heads * a.head_dim, a.rows, kernels::HeadGateQ8CudaSupports(a)));
  if (q8.natural != nullptr) {
    RETURN_IF_ERROR(
        KernelResult(kernels::HeadGateQ8Cuda(a, q8.natural, q8.pair, stream()), "HeadGate"));
    RememberPrequantized(o, q8);
    return absl::OkStatus();
  }
  return KernelResult(kernels::HeadGateCuda(a, stream()), "HeadGate");
}

absl::Status CudaBackend::SwiGlu(const TensorView& g, const TensorView& u, float limit,
                                 const TensorView& z) {
  ForgetPrequantized();
  ASSIGN_OR_RETURN(const kernels::SwiGluArgs a, SwiGluOpArgs(g, u, limit, z));
  ASSIGN_OR_RETURN(const kernels::RmsNormQ8Outputs q8,
                   FusedQ8Outputs(a.n, a.rows, kernels::SwiGluQ8CudaSupports(a)));
  if (q8.natural != nullptr) {
    RETURN_IF_ERROR(
        KernelResult(kernels::SwiGluQ8Cuda(a, q8.natural, q8.pair, stream()), "SwiGlu"));
    RememberPrequantized(z, q8);
    return absl::OkStatus();
  }
  return KernelResult(kernels::SwiGluCuda(a, stream()), "SwiGlu");
}

absl::Status CudaBackend::Add(const TensorView& a, const TensorView& b, const TensorView& y) {
  ForgetPrequantized();
  ASSIGN_OR_RETURN(const kernels::AddArgs args, AddOpArgs(a, b, y));
  return KernelResult(kernels::AddCuda(args, stream()), "Add");
}

absl::Status CudaBackend::AddRmsNorm(const TensorView& h, const TensorView& delta,
                                     const WeightView& weight, float eps, const TensorView& out) {
  ASSIGN_OR_RETURN(const kernels::AddArgs add, AddOpArgs(h, delta, h));
  ASSIGN_OR_RETURN(const kernels::RmsNormArgs norm, RmsNormOpArgs(h, weight, eps, out));
  if (out.data == h.data || out.data == delta.data) {
    return absl::InvalidArgumentError("AddRmsNorm: out must not alias h or delta");
  }
  ForgetPrequantized();
  if (!kernels::AddRmsNormCudaSupports(norm, add.b, add.b_stride)) {
    return Backend::AddRmsNorm(h, delta, weight, eps, out);  // the two kernels
  }
  ASSIGN_OR_RETURN(const kernels::RmsNormQ8Outputs q8,
                   FusedQ8Outputs(norm.n, norm.rows, kernels::RmsNormQ8CudaSupports(norm)));
  const bool fused_q8 = q8.natural != nullptr;
  RETURN_IF_ERROR(KernelResult(kernels::AddRmsNormCuda(norm, h.f32(), add.b, add.b_stride, stream(),
                                                       fused_q8 ? &q8 : nullptr),
                               "AddRmsNorm"));
  if (fused_q8) RememberPrequantized(out, q8);
  return absl::OkStatus();
}

absl::Status CudaBackend::RouterTopK(const TensorView& logits, const RouterParams& p,
                                     std::span<int32_t> ids, std::span<float> weights) {
  ASSIGN_OR_RETURN(const kernels::RouterArgs a, RouterOpArgs(logits, p, ids, weights));
  return KernelResult(kernels::RouterCuda(a, stream()), "RouterTopK");
}

absl::Status CudaBackend::LogitsTopK(const TensorView& logits, int32_t k,
                                     const LogitsTopKOutputs& out) {
  ASSIGN_OR_RETURN(const kernels::LogitsTopKArgs a, LogitsTopKOpArgs(logits, k, out));
  if (KernelStatus s = kernels::ValidateLogitsTopK(a); s != KernelStatus::kOk) {
    return KernelResult(s, "LogitsTopK");
  }
  if (a.rows == 0) return absl::OkStatus();
  if (!pointwise_) pointwise_ = std::make_shared<PointwiseState>();
  const size_t bytes = kernels::LogitsTopKCudaScratchBytes(a.rows, a.vocab, a.k);
  ASSIGN_OR_RETURN(void* scratch, EnsureScratch(pointwise_->topk, bytes, "LogitsTopK"));
  return KernelResult(kernels::LogitsTopKCuda(a, scratch, pointwise_->topk.bytes, stream()),
                      "LogitsTopK");
}

}  // namespace stepserve
