// Step35Model's logits: which rows get them, the final norm and LM head, the optional top entries
// per row (Backend::LogitsTopK) and the download of whichever the caller asked for.
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/model/step35_model.h"
#include "engine/model/step35_rows.h"

namespace stepserve::model {

absl::StatusOr<Step35Model::LogitPlan> Step35Model::PlanLogits(Rows& rows,
                                                               std::span<const BatchSequence> batch,
                                                               int32_t top_k) {
  if (top_k < 0 || top_k > kernels::kLogitsTopKMaxK) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logit_top_k must be in [0, %d], got %d", kernels::kLogitsTopKMaxK, top_k));
  }
  // The requested rows are each sequence's trailing rows. When they form one run of h (a single
  // sequence, or one row per sequence in decode) the norm reads them in place; otherwise they are
  // gathered, one copy per sequence.
  LogitPlan plan;
  plan.top_k = top_k;
  int64_t row = 0;
  for (const BatchSequence& seq : batch) {
    const int64_t count = static_cast<int64_t>(seq.tokens.size());
    if (seq.logit_rows > 0) {
      const int64_t begin = row + count - seq.logit_rows;
      if (plan.first < 0) plan.first = begin;
      plan.contiguous = plan.contiguous && begin == plan.first + plan.m;
      plan.m += seq.logit_rows;
    }
    row += count;
  }
  // Logits are computed into backend memory first (grow-only) unless the backend is the host.
  const size_t bytes = static_cast<size_t>(plan.m * weights_.n_vocab) * sizeof(float);
  if (!backend_->host_visible() && rows.logits.bytes() < bytes) {
    rows.logits.Reset();
    ASSIGN_OR_RETURN(rows.logits, backend_->Allocate(bytes));
  }
  const size_t candidate_bytes = CandidateBytes(plan);
  if (!backend_->host_visible() && rows.candidates.bytes() < candidate_bytes) {
    rows.candidates.Reset();
    ASSIGN_OR_RETURN(rows.candidates, backend_->Allocate(candidate_bytes));
  }
  return plan;
}

absl::Status Step35Model::EnqueueLogits(Rows& rows, std::span<const BatchSequence> batch,
                                        const LogitPlan& plan, Tensor norm, Tensor head,
                                        ForwardOutput* out) {
  const int64_t d = hparams_.n_embd, vocab = weights_.n_vocab, m = plan.m;
  if (m == 0) return absl::OkStatus();
  TensorView picked = TensorView::F32(rows.h.buffer.f32() + plan.first * d, d, m);
  if (!plan.contiguous) {
    picked = rows.Mat(rows.a, d, m);
    int64_t row = 0, dst = 0;
    for (const BatchSequence& seq : batch) {
      const int64_t count = static_cast<int64_t>(seq.tokens.size());
      const size_t bytes = static_cast<size_t>(seq.logit_rows * d) * sizeof(float);
      RETURN_IF_ERROR(backend_->Copy(rows.h.buffer.f32() + (row + count - seq.logit_rows) * d,
                                     picked.f32() + dst * d, bytes));
      dst += seq.logit_rows;
      row += count;
    }
  }
  TensorView normed = rows.Mat(rows.f, d, m);
  RETURN_IF_ERROR(backend_->RmsNorm(picked, placed_[norm], hparams_.rms_eps, normed));
  if (backend_->host_visible()) {
    // resize, not assign: no zero-fill of a buffer the matmul overwrites anyway.
    out->logits.resize(static_cast<size_t>(m * vocab));
    const TensorView logits = TensorView::F32(out->logits.data(), vocab, m);
    RETURN_IF_ERROR(backend_->Matmul(normed, placed_[head], logits));
    if (plan.top_k == 0) return absl::OkStatus();
    LogitCandidates& c = out->candidates;
    c.k = plan.top_k;
    c.ids.resize(static_cast<size_t>(m * plan.top_k));
    c.values.resize(c.ids.size());
    c.argmax.resize(static_cast<size_t>(m));
    c.log_sum_exp.resize(static_cast<size_t>(m));
    return backend_->LogitsTopK(
        logits, plan.top_k, {c.ids.data(), c.values.data(), c.argmax.data(), c.log_sum_exp.data()});
  }
  const TensorView logits = TensorView::F32(rows.logits.f32(), vocab, m);
  RETURN_IF_ERROR(backend_->Matmul(normed, placed_[head], logits));
  if (plan.top_k == 0) return absl::OkStatus();
  auto* base = static_cast<uint8_t*>(rows.candidates.data());
  const size_t kk = static_cast<size_t>(m * plan.top_k) * 4;
  return backend_->LogitsTopK(
      logits, plan.top_k,
      {reinterpret_cast<int32_t*>(base), reinterpret_cast<float*>(base + kk),
       reinterpret_cast<int32_t*>(base + 2 * kk), reinterpret_cast<float*>(base + 2 * kk + m * 4)});
}

size_t Step35Model::CandidateBytes(const LogitPlan& plan) {
  // ids and values (k per row), then argmax and log-sum-exp (one per row), 4 bytes each.
  return static_cast<size_t>(plan.m) * (2 * static_cast<size_t>(plan.top_k) + 2) * 4;
}

absl::Status Step35Model::DownloadLogits(Rows& rows, const LogitPlan& plan,
                                         ForwardOutput* out) {
  if (plan.top_k == 0) out->candidates = {};
  if (plan.m == 0) {
    out->logits.clear();
    return absl::OkStatus();
  }
  if (plan.top_k > 0) {
    out->logits.clear();                                    // the candidates stand for them
    if (backend_->host_visible()) return absl::OkStatus();  // EnqueueLogits wrote them in place
    std::vector<uint8_t>& bytes = rows.candidates_host;  // one download, then split
    bytes.resize(CandidateBytes(plan));
    RETURN_IF_ERROR(backend_->Download(rows.candidates.data(), bytes.data(), bytes.size()));
    LogitCandidates& c = out->candidates;
    c.k = plan.top_k;
    const size_t kk = static_cast<size_t>(plan.m * plan.top_k), m = static_cast<size_t>(plan.m);
    c.ids.resize(kk);
    c.values.resize(kk);
    c.argmax.resize(m);
    c.log_sum_exp.resize(m);
    std::memcpy(c.ids.data(), bytes.data(), kk * 4);
    std::memcpy(c.values.data(), bytes.data() + kk * 4, kk * 4);
    std::memcpy(c.argmax.data(), bytes.data() + 2 * kk * 4, m * 4);
    std::memcpy(c.log_sum_exp.data(), bytes.data() + 2 * kk * 4 + m * 4, m * 4);
    return absl::OkStatus();
  }
  if (backend_->host_visible()) return absl::OkStatus();  // EnqueueLogits wrote them in place
  out->logits.resize(static_cast<size_t>(plan.m * weights_.n_vocab));
  return backend_->Download(rows.logits.data(), out->logits.data(),
                            out->logits.size() * sizeof(float));
}

}  // namespace stepserve::model
