// MtpDrafter: catch-up (spec 5.4), chain / recurrent drafting (5.5), rollback (5.6.4-5).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/spec/mtp_speculator.h"

namespace stepserve::spec {
namespace {

using model::BatchSequence;
using model::ForwardOutput;

// llama.cpp's draft sampler keeps the 10 largest logits (top-k 10) before its distribution
// sampler; the proposal is the first of them and p_min is tested against its softmax share.
constexpr int kDraftTopK = 10;

struct TopCandidate {
  int32_t token = -1;
  float prob = 0.0f;  // softmax over the kDraftTopK largest logits
};

// The largest logit (ties to the lower id, as VerifyGreedy's argmax) and its probability among
// the top kDraftTopK. An insertion scan: one pass over the row, no allocation.
TopCandidate DraftCandidate(std::span<const float> row) {
  std::array<float, kDraftTopK> top;
  std::array<int32_t, kDraftTopK> ids;
  int n = 0;
  for (int32_t id = 0; id < static_cast<int32_t>(row.size()); ++id) {
    const float z = row[id];
    if (n == kDraftTopK && !(z > top[n - 1])) continue;  // ids ascend: equal keeps the older
    int pos = n < kDraftTopK ? n++ : kDraftTopK - 1;
    while (pos > 0 && z > top[pos - 1]) {
      top[pos] = top[pos - 1];
      ids[pos] = ids[pos - 1];
      --pos;
    }
    top[pos] = z;
    ids[pos] = id;
  }
  TopCandidate c;
  if (n == 0 || !std::isfinite(top[0])) return c;
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(top[i]) - top[0]);
  c.token = ids[0];
  c.prob = static_cast<float>(1.0 / sum);
  return c;
}

absl::Status CheckState(const MtpSequenceState* state, int64_t n_embd, size_t index,
                        const char* what) {
  if (state == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("%s item %d: state is null", what, index));
  }
  if (static_cast<int64_t>(state->pending_h.size()) != n_embd) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s item %d: pending_h has %d floats, n_embd is %d (call Reset first)",
                        what, index, state->pending_h.size(), n_embd));
  }
  return absl::OkStatus();
}

}  // namespace

void MtpSequenceState::Reset(int64_t n_embd) {
  n_cached = 0;
  pending_h.assign(static_cast<size_t>(n_embd), 0.0f);
  verify_start = 0;
  verify_h.clear();
}

absl::StatusOr<std::unique_ptr<MtpDrafter>> MtpDrafter::CreateForHeads(
    model::Step35Model* heads_model, const MtpDrafterOptions& options) {
  if (heads_model == nullptr) return absl::InvalidArgumentError("MTP drafter: no model");
  const int heads = heads_model->num_mtp_heads();
  if (heads <= 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "MTP drafter: model \"%s\" has no MTP heads loaded (nextn_predict_layers = %d)",
        heads_model->hparams().name, heads_model->hparams().n_nextn));
  }
  if (options.n_max < 0 || options.n_min < 0 || options.n_min > std::max(options.n_max, 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MTP drafter: need 0 <= n_min <= n_max, got n_min %d, n_max %d",
                        options.n_min, options.n_max));
  }
  if (!(options.p_min >= 0.0f && options.p_min <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MTP drafter: p_min must be in [0, 1], got %g", options.p_min));
  }
  auto drafter = std::unique_ptr<MtpDrafter>(new MtpDrafter());
  drafter->heads_ = heads_model;
  drafter->options_ = options;
  drafter->num_heads_ = heads;
  drafter->n_embd_ = heads_model->hparams().n_embd;
  drafter->n_vocab_ = heads_model->n_vocab();
  switch (options.mode) {
    case MtpMode::kAuto:
      drafter->mode_ = heads > 1 ? MtpMode::kChain : MtpMode::kRecurrent;
      break;
    case MtpMode::kChain:
    case MtpMode::kRecurrent:
      drafter->mode_ = options.mode;
      break;
  }
  return drafter;
}

absl::StatusOr<std::unique_ptr<MtpDrafter>> MtpDrafter::Create(const model::Step35Model& target,
                                                               model::Step35Model* draft,
                                                               const MtpDrafterOptions& options) {
  if (!target.weights().has_trunk) {
    return absl::InvalidArgumentError(
        "MTP drafter: the target model is an MTP-only file (no trunk layers); load the trunk "
        "file as the target and the MTP-only file as the draft");
  }
  if (draft == nullptr) {
    // The heads live in the target (combined file). const_cast: drafting only runs the heads'
    // forward, which needs the non-const model; the target object is the caller's anyway.
    return CreateForHeads(const_cast<model::Step35Model*>(&target), options);
  }
  // A separate draft file shares the target's tokenizer: ids and hidden vectors must mean the
  // same thing in both models.
  if (draft->n_vocab() != target.n_vocab()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MTP draft model has n_vocab %d (token_embd rows) but the target has %d; the draft must "
        "come from the same checkpoint",
        draft->n_vocab(), target.n_vocab()));
  }
  if (draft->hparams().n_embd != target.hparams().n_embd) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MTP draft model has n_embd %d but the target has %d; the heads consume the target's "
        "hidden states",
        draft->hparams().n_embd, target.hparams().n_embd));
  }
  return CreateForHeads(draft, options);
}

model::KvStorageOptions MtpDrafter::DraftKvOptions(const model::Hparams& draft_hparams,
                                                   int32_t block_size, int32_t full_blocks,
                                                   int32_t swa_blocks) {
  return {.block_size = block_size,
          .full_blocks = full_blocks,
          .swa_blocks = swa_blocks,
          .first_layer = draft_hparams.n_layer,
          .end_layer = draft_hparams.n_layer_all};
}

int MtpDrafter::max_draft() const {
  return mode_ == MtpMode::kChain ? std::min(options_.n_max, num_heads_) : options_.n_max;
}

absl::Status MtpDrafter::CatchUp(std::span<const CatchUpItem> items, model::KvStorage& kv) {
  if (items.empty()) return absl::OkStatus();
  const int64_t d = n_embd_;
  // Row t's hidden input is the target hidden of row t - 1; row 0 takes pending_h.
  std::vector<std::vector<float>> hidden_in(items.size());
  std::vector<BatchSequence> batch(items.size());
  for (size_t s = 0; s < items.size(); ++s) {
    const CatchUpItem& item = items[s];
    RETURN_IF_ERROR(CheckState(item.state, d, s, "MTP catch-up"));
    const int64_t rows = static_cast<int64_t>(item.tokens.size());
    if (rows == 0) {
      return absl::InvalidArgumentError(absl::StrFormat("MTP catch-up item %d: no rows", s));
    }
    if (static_cast<int64_t>(item.target_hidden.size()) != rows * d) {
      return absl::InvalidArgumentError(
          absl::StrFormat("MTP catch-up item %d: %d target hidden floats for %d rows of n_embd %d",
                          s, item.target_hidden.size(), rows, d));
    }
    std::vector<float>& h = hidden_in[s];
    h.resize(static_cast<size_t>(rows * d));
    std::memcpy(h.data(), item.state->pending_h.data(), d * sizeof(float));
    std::memcpy(h.data() + d, item.target_hidden.data(), (rows - 1) * d * sizeof(float));
    batch[s] = BatchSequence{.tokens = item.tokens,
                             .start_pos = item.state->n_cached,
                             .full_table = item.full_table,
                             .swa_table = item.swa_table,
                             .logit_rows = 0,
                             .mtp_hidden = h};
  }
  // Every head that drafts gets its KV over these positions from target hiddens (chain mode:
  // heads 0 .. max_draft-1; recurrent mode: head 0 only).
  const int heads_used = mode_ == MtpMode::kChain ? std::max(max_draft(), 1) : 1;
  ForwardOutput out;
  for (int head = 0; head < heads_used; ++head) {
    absl::Status st = heads_->ForwardMtp(head, batch, kv, &out);
    if (!st.ok()) {
      return absl::Status(st.code(),
                          absl::StrFormat("MTP catch-up, head %d: %s", head, st.message()));
    }
  }
  for (const CatchUpItem& item : items) {
    MtpSequenceState& state = *item.state;
    const int64_t rows = static_cast<int64_t>(item.tokens.size());
    state.verify_start = state.n_cached;
    state.verify_h.assign(item.target_hidden.begin(), item.target_hidden.end());
    state.pending_h.assign(item.target_hidden.end() - d, item.target_hidden.end());
    state.n_cached += rows;
  }
  return absl::OkStatus();
}

absl::Status MtpDrafter::Rollback(MtpSequenceState& state, int64_t new_length) {
  const int64_t d = static_cast<int64_t>(state.pending_h.size());
  const int64_t rows = d == 0 ? 0 : static_cast<int64_t>(state.verify_h.size()) / d;
  if (new_length < state.verify_start + 1 || new_length > state.n_cached ||
      state.verify_start + rows != state.n_cached) {
    return absl::OutOfRangeError(
        absl::StrFormat("MTP rollback to length %d: the last catch-up covered positions [%d, %d)",
                        new_length, state.verify_start, state.verify_start + rows));
  }
  const int64_t row = new_length - 1 - state.verify_start;
  std::copy(state.verify_h.begin() + row * d, state.verify_h.begin() + (row + 1) * d,
            state.pending_h.begin());
  state.verify_h.resize(static_cast<size_t>((row + 1) * d));
  state.n_cached = new_length;
  return absl::OkStatus();
}

absl::Status MtpDrafter::Draft(std::span<const DraftItem> items, model::KvStorage& kv,
                               std::vector<DraftTokens>* out) {
  const int64_t d = n_embd_;
  out->assign(items.size(), DraftTokens{});
  // Per item: the step limit and the output hiddens h_0, h_1, ... of the steps so far.
  std::vector<int> limit(items.size(), 0);
  std::vector<std::vector<float>> h_out(items.size());
  std::vector<bool> active(items.size(), false);
  int steps = 0;
  for (size_t s = 0; s < items.size(); ++s) {
    const DraftItem& item = items[s];
    RETURN_IF_ERROR(CheckState(item.state, d, s, "MTP draft"));
    if (item.id_last < 0 || item.id_last >= n_vocab_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("MTP draft item %d: id_last %d outside the vocabulary [0, %d)", s,
                          item.id_last, n_vocab_));
    }
    limit[s] = std::max(0, std::min(max_draft(), item.max_tokens));
    active[s] = limit[s] > 0;
    steps = std::max(steps, limit[s]);
  }
  const bool chain = mode_ == MtpMode::kChain;
  std::vector<std::vector<int32_t>> tokens(items.size());
  std::vector<std::vector<float>> hidden(items.size());
  std::vector<BatchSequence> batch;
  std::vector<size_t> batch_items;
  ForwardOutput fwd;
  for (int step = 0; step < steps; ++step) {
    batch.clear();
    batch_items.clear();
    for (size_t s = 0; s < items.size(); ++s) {
      if (!active[s] || step >= limit[s]) continue;
      const DraftItem& item = items[s];
      const std::vector<int32_t>& drafted = (*out)[s].tokens;
      // Chain step i re-decodes rows n_past .. n_past + i on head i: (id_last, pending_h), then
      // (d_t, h_{t-1}). Recurrent step i > 0 adds only (d_i, h_{i-1}) on head 0.
      const bool full_rows = chain || step == 0;
      std::vector<int32_t>& tok = tokens[s];
      std::vector<float>& hid = hidden[s];
      tok.clear();
      hid.clear();
      if (full_rows) {
        tok.push_back(item.id_last);
        hid.insert(hid.end(), item.state->pending_h.begin(), item.state->pending_h.end());
        for (int t = 1; t <= step; ++t) {
          tok.push_back(drafted[t - 1]);
          hid.insert(hid.end(), h_out[s].begin() + (t - 1) * d, h_out[s].begin() + t * d);
        }
      } else {
        tok.push_back(drafted[step - 1]);
        hid.insert(hid.end(), h_out[s].begin() + (step - 1) * d, h_out[s].begin() + step * d);
      }
      batch.push_back(BatchSequence{.tokens = tok,
                                    .start_pos = item.state->n_cached + (full_rows ? 0 : step),
                                    .full_table = item.full_table,
                                    .swa_table = item.swa_table,
                                    .logit_rows = 1,
                                    .mtp_hidden = hid});
      batch_items.push_back(s);
    }
    if (batch.empty()) break;
    const int head = chain ? step : 0;
    absl::Status st = heads_->ForwardMtp(head, batch, kv, &fwd);
    if (!st.ok()) {
      return absl::Status(
          st.code(), absl::StrFormat("MTP draft step %d, head %d: %s", step, head, st.message()));
    }
    int64_t row_end = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      const size_t s = batch_items[b];
      row_end += static_cast<int64_t>(batch[b].tokens.size());
      const float* h_last = fwd.hidden.data() + (row_end - 1) * d;
      h_out[s].insert(h_out[s].end(), h_last, h_last + d);
      const TopCandidate c =
          DraftCandidate(std::span<const float>(fwd.logits).subspan(b * n_vocab_, n_vocab_));
      if (c.token < 0 || c.prob < options_.p_min) {
        active[s] = false;  // the low-confidence candidate is not proposed (llama.cpp)
        continue;
      }
      (*out)[s].tokens.push_back(c.token);
      (*out)[s].top_prob.push_back(c.prob);
    }
  }
  for (DraftTokens& draft : *out) {
    if (static_cast<int>(draft.tokens.size()) < options_.n_min) draft = DraftTokens{};
  }
  return absl::OkStatus();
}

}  // namespace stepserve::spec
