// CPU implementation of Backend: shape checks with precise messages, then one kernel call each.
#include "engine/backend/cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/op_checks.h"
#include "engine/base/status_macros.h"
#include "engine/base/thread_pool.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embed/embed.h"
#include "kernels/matmul/matmul.h"
#include "kernels/moe/moe.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"

namespace stepserve {
namespace {

using kernels::KernelStatus;

absl::Status FromKernel(KernelStatus status, const char* op) {
  const std::string message =
      absl::StrFormat("%s: kernel reported %s", op, kernels::KernelStatusName(status));
  switch (status) {
    case KernelStatus::kOk:
      return absl::OkStatus();
    case KernelStatus::kOutOfRange:
      return absl::OutOfRangeError(message);
    case KernelStatus::kUnsupportedType:
      return absl::UnimplementedError(message);
    case KernelStatus::kTooLarge:
      return absl::ResourceExhaustedError(message);
    case KernelStatus::kInvalidArgument:
      break;
  }
  return absl::InvalidArgumentError(message);
}

absl::Status CopyChecked(const void* src, void* dst, size_t bytes, const char* op) {
  if (bytes == 0) return absl::OkStatus();
  if (src == nullptr || dst == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: null pointer for %d bytes", op, bytes));
  }
  std::memmove(dst, src, bytes);
  return absl::OkStatus();
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options) : pool_(options.num_threads) {}

  std::string_view name() const override { return "cpu"; }

  // Memory: plain host allocations; weights stay in the mmapped file.
  bool host_visible() const override { return true; }
  bool SupportsKvDtype(KvDtype dtype) const override {
    return dtype == KvDtype::kF32 || dtype == KvDtype::kF16 || dtype == KvDtype::kQ8_0;
  }
  absl::StatusOr<BackendBuffer> Allocate(size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    void* data = std::aligned_alloc(256, rounded);
    if (data == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("cpu backend: cannot allocate %d bytes of host memory", bytes));
    }
    buffer_bytes_->fetch_add(rounded);
    std::shared_ptr<std::atomic<uint64_t>> counter = buffer_bytes_;
    return BackendBuffer(data, bytes, [counter, rounded](void* p) {
      counter->fetch_sub(rounded);
      std::free(p);
    });
  }
  absl::Status Upload(const void* host, void* dst, size_t bytes) override {
    return CopyChecked(host, dst, bytes, "Upload");
  }
  absl::Status Download(const void* src, void* host, size_t bytes) override {
    return CopyChecked(src, host, bytes, "Download");
  }
  absl::Status Copy(const void* src, void* dst, size_t bytes) override {
    return CopyChecked(src, dst, bytes, "Copy");
  }
  absl::Status Zero(void* dst, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr) return absl::InvalidArgumentError("Zero: null destination");
    std::memset(dst, 0, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::StatusOr<WeightView> PlaceWeight(const WeightView& host, std::string_view name) override {
    if (host.data == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("PlaceWeight: %s has no data", name));
    }
    return host;
  }
  BackendMemoryInfo memory_info() const override {
    BackendMemoryInfo info;
    const long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) info.total_bytes = uint64_t(pages) * uint64_t(page_size);
    if (avail > 0 && page_size > 0) info.free_bytes = uint64_t(avail) * uint64_t(page_size);
    info.buffer_bytes = buffer_bytes_->load();
    return info;
  }

  absl::Status Embed(const WeightView& table, std::span<const int32_t> ids,
                     const TensorView& out) override {
    ASSIGN_OR_RETURN(const kernels::EmbedArgs a, EmbedOpArgs(table, ids, out));
    return FromKernel(kernels::EmbedCpu(a, &pool_), "Embed");
  }

  absl::Status RmsNorm(const TensorView& x, const WeightView& weight, float eps,
                       const TensorView& out) override {
    ASSIGN_OR_RETURN(const kernels::RmsNormArgs a, RmsNormOpArgs(x, weight, eps, out));
    return FromKernel(kernels::RmsNormCpu(a, &pool_), "RmsNorm");
  }

  absl::Status Matmul(const TensorView& x, const WeightView& w, const TensorView& y) override {
    ASSIGN_OR_RETURN(const kernels::MatmulArgs a, MatmulOpArgs(x, w, y));
    if (a.rows == 0) return absl::OkStatus();
    return FromKernel(kernels::MatmulCpu(a, &pool_), "Matmul");
  }

  absl::Status QkNormRope(const TensorView& q, const TensorView& k, const QkNormRopeParams& p,
                          std::span<const int32_t> positions) override {
    RETURN_IF_ERROR(CheckQkNormRope(q, k, p, static_cast<int64_t>(positions.size())));
    const int64_t dh = p.head_dim;
    for (const auto& [t, norm] : {std::pair{&q, &p.q_norm}, std::pair{&k, &p.k_norm}}) {
      if (t->data == nullptr) continue;  // k is optional
      kernels::RmsNormArgs n;
      n.x = t->f32();
      n.x_stride = t->stride_floats();
      n.y = t->f32();
      n.y_stride = t->stride_floats();
      n.rows = t->rows();
      n.heads = t->cols() / dh;
      n.n = dh;
      n.weight = static_cast<const float*>(norm->data);
      n.eps = p.eps;
      RETURN_IF_ERROR(FromKernel(kernels::RmsNormCpu(n, &pool_), "QkNormRope (norm)"));
      kernels::RopeArgs r;
      r.x = t->f32();
      r.x_stride = t->stride_floats();
      r.tokens = t->rows();
      r.heads = t->cols() / dh;
      r.head_dim = dh;
      r.positions = positions.data();
      r.n_rot = p.n_rot;
      r.base = p.base;
      r.freq_factors = p.freq_factors.empty() ? nullptr : p.freq_factors.data();
      RETURN_IF_ERROR(FromKernel(kernels::RopeNeoxCpu(r, &pool_), "QkNormRope (rope)"));
    }
    return absl::OkStatus();
  }

  absl::Status AppendKv(const TensorView& k, const TensorView& v, const AttentionBatch& batch,
                        const KvCacheView& cache) override {
    ASSIGN_OR_RETURN(kernels::KvAppendArgs a, AppendKvOpArgs(k, v, batch, cache, &slots_));
    return FromKernel(kernels::KvAppendCpu(a, &pool_), "AppendKv");
  }

  absl::Status Attention(const TensorView& q, const AttentionBatch& batch, const KvCacheView& cache,
                         const AttentionParams& params, const TensorView& out) override {
    ASSIGN_OR_RETURN(kernels::PagedAttentionArgs a,
                     AttentionOpArgs(q, batch, cache, params, out, &seqs_));
    return FromKernel(kernels::PagedAttentionCpu(a, &pool_), "Attention");
  }

  absl::Status HeadGate(const TensorView& o, const TensorView& gate_logits,
                        int64_t head_dim) override {
    ASSIGN_OR_RETURN(const kernels::HeadGateArgs a, HeadGateOpArgs(o, gate_logits, head_dim));
    return FromKernel(kernels::HeadGateCpu(a, &pool_), "HeadGate");
  }

  absl::Status SwiGlu(const TensorView& g, const TensorView& u, float limit,
                      const TensorView& z) override {
    ASSIGN_OR_RETURN(const kernels::SwiGluArgs a, SwiGluOpArgs(g, u, limit, z));
    return FromKernel(kernels::SwiGluCpu(a, &pool_), "SwiGlu");
  }

  absl::Status Add(const TensorView& a, const TensorView& b, const TensorView& y) override {
    ASSIGN_OR_RETURN(const kernels::AddArgs args, AddOpArgs(a, b, y));
    return FromKernel(kernels::AddCpu(args, &pool_), "Add");
  }

  absl::Status LogitsTopK(const TensorView& logits, int32_t k,
                          const LogitsTopKOutputs& out) override {
    ASSIGN_OR_RETURN(const kernels::LogitsTopKArgs a, LogitsTopKOpArgs(logits, k, out));
    return FromKernel(kernels::LogitsTopKRef(a), "LogitsTopK");
  }
  absl::Status RouterTopK(const TensorView& logits, const RouterParams& p, std::span<int32_t> ids,
                          std::span<float> weights) override {
    ASSIGN_OR_RETURN(const kernels::RouterArgs a, RouterOpArgs(logits, p, ids, weights));
    return FromKernel(kernels::RouterCpu(a, &pool_), "RouterTopK");
  }

  absl::Status MoeExperts(const TensorView& x, const ExpertWeights& e, std::span<const int32_t> ids,
                          std::span<const float> weights, int64_t top_k,
                          const TensorView& y) override {
    ASSIGN_OR_RETURN(kernels::MoeExpertsArgs a, MoeExpertsOpArgs(x, e, ids, weights, top_k, y));
    moe_workspace_.resize(kernels::MoeExpertsWorkspaceFloats(a.rows, top_k, a.n_embd, a.n_ff));
    moe_index_.resize(kernels::MoeExpertsIndexWorkspaceLen(a.rows, top_k, a.n_experts));
    a.workspace = moe_workspace_.data();
    a.workspace_floats = static_cast<int64_t>(moe_workspace_.size());
    a.index_workspace = moe_index_.data();
    a.index_workspace_len = static_cast<int64_t>(moe_index_.size());
    return FromKernel(kernels::MoeExpertsCpu(a, &pool_), "MoeExperts");
  }

 private:
  ThreadPool pool_;
  std::shared_ptr<std::atomic<uint64_t>> buffer_bytes_ = std::make_shared<std::atomic<uint64_t>>(0);
  // Scratch reused across calls (one engine thread drives a backend).
  std::vector<int64_t> slots_;
  std::vector<kernels::AttentionSeq> seqs_;
  std::vector<float> moe_workspace_;
  std::vector<int32_t> moe_index_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace stepserve
