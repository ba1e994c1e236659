// SpeculativeGenerator: the single-sequence draft / verify / accept / rollback loop (spec 5.6) and
// its counters.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/sequence_blocks.h"
#include "engine/sampling/logits_ops.h"
#include "engine/sampling/speculative.h"
#include "engine/spec/mtp_speculator.h"

namespace stepserve::spec {
namespace {

using model::BatchSequence;
using model::ForwardOutput;

// Greedy params that nothing but argmax decides: VerifyGreedy on raw logits is then exactly the
// sampler's choice, and cheaper than running the chain row by row.
bool PlainGreedy(const SamplingParams& p) {
  return p.IsGreedy() && !p.HasPenalties() && p.logit_bias.empty() && p.n_logprobs == 0;
}

SampleResult GreedyResult(std::span<const float> row, int32_t token) {
  SampleResult r;
  r.token = token;
  r.logprob = static_cast<float>(row[token] - LogSumExp(row));
  return r;
}

}  // namespace

double SpecStats::acceptance_rate() const {
  return draft_tokens == 0 ? 0.0 : static_cast<double>(accepted_tokens) / draft_tokens;
}

double SpecStats::mean_accepted_length() const {
  return draft_steps == 0 ? 0.0 : 1.0 + static_cast<double>(accepted_tokens) / draft_steps;
}

std::string SpecStats::ToJson() const {
  std::string per_pos;
  for (size_t j = 0; j < drafted_at.size(); ++j) {
    absl::StrAppend(
        &per_pos, j == 0 ? "" : ",",
        absl::StrFormat("{\"drafted\":%d,\"accepted\":%d}", drafted_at[j], accepted_at[j]));
  }
  return absl::StrFormat(
      "{\"target_forwards\":%d,\"draft_steps\":%d,\"draft_tokens\":%d,\"accepted_tokens\":%d,"
      "\"emitted_tokens\":%d,\"acceptance_rate\":%.4f,\"mean_accepted_length\":%.4f,"
      "\"per_position\":[%s]}",
      target_forwards, draft_steps, draft_tokens, accepted_tokens, emitted_tokens,
      acceptance_rate(), mean_accepted_length(), per_pos);
}

absl::StatusOr<std::unique_ptr<SpeculativeGenerator>> SpeculativeGenerator::Create(
    model::Step35Model* target, model::Step35Model* draft, const SpeculativeOptions& options) {
  if (target == nullptr) return absl::InvalidArgumentError("speculative generator: no target");
  if (options.block_size <= 0 || options.prefill_chunk <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("speculative generator: block_size (%d) and prefill_chunk (%d) must be "
                        "positive",
                        options.block_size, options.prefill_chunk));
  }
  auto gen = std::unique_ptr<SpeculativeGenerator>(new SpeculativeGenerator());
  gen->target_ = target;
  gen->draft_ = draft;
  gen->options_ = options;
  if (options.speculate) {
    ASSIGN_OR_RETURN(gen->drafter_, MtpDrafter::Create(*target, draft, options.drafter));
  } else if (!target->weights().has_trunk) {
    return absl::InvalidArgumentError("speculative generator: the target has no trunk layers");
  }
  return gen;
}

absl::StatusOr<GenerationResult> SpeculativeGenerator::Generate(std::span<const int32_t> prompt,
                                                                const SamplingParams& params,
                                                                int max_new_tokens,
                                                                const TokenCallback& on_tokens) {
  const model::Hparams& hp = target_->hparams();
  const int64_t n_vocab = target_->n_vocab();
  const int64_t d = hp.n_embd;
  if (prompt.empty()) return absl::InvalidArgumentError("generate: empty prompt");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("generate: prompt token %d (index %d) outside the vocabulary [0, %d)",
                          prompt[i], i, n_vocab));
    }
  }
  if (max_new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("generate: max_new_tokens must be >= 0, got %d", max_new_tokens));
  }
  ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(params, static_cast<int>(n_vocab), prompt));
  GenerationResult result;
  if (max_new_tokens == 0) return result;

  const int k_max = drafter_ != nullptr ? drafter_->max_draft() : 0;
  result.stats.drafted_at.assign(k_max, 0);
  result.stats.accepted_at.assign(k_max, 0);

  // KV sized for this request: prompt + generated + the verification rows past the end.
  const int32_t bs = options_.block_size;
  const int64_t positions = static_cast<int64_t>(prompt.size()) + max_new_tokens + k_max + 1;
  if (positions > hp.n_ctx_train && hp.n_ctx_train > 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "generate: prompt (%d) + max_new_tokens (%d) + draft room (%d) exceeds the model's "
        "context_length %d",
        prompt.size(), max_new_tokens, k_max + 1, hp.n_ctx_train));
  }
  const int32_t blocks = static_cast<int32_t>((positions + bs - 1) / bs + 1);
  bool has_full = false;
  for (int il = 0; il < hp.n_layer_all; ++il) has_full |= !hp.layers[il].is_swa;
  // Trunk layers always; the heads' layers too when they live in the target file.
  const bool heads_in_target = drafter_ != nullptr && draft_ == nullptr;
  ASSIGN_OR_RETURN(
      model::KvStorage target_kv,
      model::KvStorage::Create(target_->backend(), hp,
                               {.block_size = bs,
                                    .full_blocks = blocks,
                                    .swa_blocks = blocks,
                                    .end_layer = heads_in_target ? hp.n_layer_all : hp.n_layer}));
  std::optional<model::KvStorage> draft_kv;
  if (drafter_ != nullptr && draft_ != nullptr) {
    ASSIGN_OR_RETURN(draft_kv,
                     model::KvStorage::Create(
                         draft_->backend(), draft_->hparams(),
                         MtpDrafter::DraftKvOptions(draft_->hparams(), bs, blocks, blocks)));
  }
  model::KvStorage& heads_kv = draft_kv.has_value() ? *draft_kv : target_kv;
  kv::BlockPool full_pool(blocks), swa_pool(blocks);
  kv::SequenceBlocks seq_blocks({.block_size = bs,
                                 .sliding_window = hp.sliding_window,
                                 .rollback_slack = k_max + 1,
                                 .has_full_layers = has_full},
                                &full_pool, &swa_pool);
  auto grow = [&](int64_t length) -> absl::Status {
    if (length > seq_blocks.length() && !seq_blocks.Grow(length)) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("generate: no KV blocks for %d positions", length));
    }
    return absl::OkStatus();
  };

  MtpSequenceState mtp;
  mtp.Reset(d);
  auto catch_up = [&](std::span<const int32_t> tokens, std::span<const float> hidden) {
    CatchUpItem item{.state = &mtp,
                     .tokens = tokens,
                     .target_hidden = hidden,
                     .full_table = seq_blocks.full_table(),
                     .swa_table = seq_blocks.swa_table()};
    return drafter_->CatchUp({&item, 1}, heads_kv);
  };

  // Prefill in chunks; each chunk's rows are caught up on the heads right away (spec 5.4).
  ForwardOutput fwd;
  // The heads consume the trunk's hidden rows.
  const model::ForwardOptions forward_options{.want_hidden = drafter_ != nullptr};
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  for (int64_t pos = 0; pos < n_prompt; pos += options_.prefill_chunk) {
    const int64_t count = std::min<int64_t>(options_.prefill_chunk, n_prompt - pos);
    RETURN_IF_ERROR(grow(pos + count));
    const bool last = pos + count == n_prompt;
    const std::span<const int32_t> chunk = prompt.subspan(pos, count);
    BatchSequence seq{.tokens = chunk,
                      .start_pos = pos,
                      .full_table = seq_blocks.full_table(),
                      .swa_table = seq_blocks.swa_table(),
                      .logit_rows = last ? 1 : 0};
    RETURN_IF_ERROR(target_->Forward({&seq, 1}, target_kv, &fwd, forward_options));
    ++result.stats.target_forwards;
    if (drafter_ != nullptr) RETURN_IF_ERROR(catch_up(chunk, fwd.hidden));
  }
  ASSIGN_OR_RETURN(SampleResult first, sampler.Sample(fwd.logits));
  result.tokens.push_back(first);
  ++result.stats.emitted_tokens;
  const auto is_stop = [&](int32_t t) {
    return std::find(options_.stop_tokens.begin(), options_.stop_tokens.end(), t) !=
           options_.stop_tokens.end();
  };
  if (is_stop(first.token)) result.stopped = true;
  bool keep_going = !on_tokens || on_tokens({&result.tokens.back(), 1});

  int64_t n_past = n_prompt;  // id_last sits here, not yet in the KV
  int32_t id_last = first.token;
  std::vector<DraftTokens> drafts;
  std::vector<int32_t> rows;
  std::vector<SampleResult> emitted;
  while (keep_going && !result.stopped && static_cast<int>(result.tokens.size()) < max_new_tokens) {
    const int remaining = max_new_tokens - static_cast<int>(result.tokens.size());
    const int k_cap = std::min(k_max, remaining - 1);
    RETURN_IF_ERROR(grow(n_past + k_cap + 1));
    rows.assign(1, id_last);
    if (k_cap > 0 && options_.draft_override) {
      const std::vector<int32_t> forced = options_.draft_override(n_past, id_last, k_cap);
      for (size_t j = 0; j < forced.size() && static_cast<int>(j) < k_cap; ++j) {
        if (forced[j] < 0 || forced[j] >= n_vocab) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "generate: draft_override token %d outside [0, %d)", forced[j], n_vocab));
        }
        rows.push_back(forced[j]);
      }
    } else if (k_cap > 0) {
      DraftItem item{.state = &mtp,
                     .id_last = id_last,
                     .max_tokens = k_cap,
                     .full_table = seq_blocks.full_table(),
                     .swa_table = seq_blocks.swa_table()};
      RETURN_IF_ERROR(drafter_->Draft({&item, 1}, heads_kv, &drafts));
      rows.insert(rows.end(), drafts[0].tokens.begin(), drafts[0].tokens.end());
    }
    const int k = static_cast<int>(rows.size()) - 1;
    // Verification: [id_last, d_1 .. d_k] at n_past .. n_past + k, logits for every row.
    BatchSequence seq{.tokens = rows,
                      .start_pos = n_past,
                      .full_table = seq_blocks.full_table(),
                      .swa_table = seq_blocks.swa_table(),
                      .logit_rows = k + 1};
    RETURN_IF_ERROR(target_->Forward({&seq, 1}, target_kv, &fwd, forward_options));
    ++result.stats.target_forwards;
    const std::span<const int32_t> draft_span(rows.data() + 1, k);
    emitted.assign(k + 1, SampleResult{});
    int n_emit = 0;
    if (PlainGreedy(params)) {
      ASSIGN_OR_RETURN(VerifyOutcome v,
                       VerifyGreedy(fwd.logits, static_cast<int>(n_vocab), draft_span));
      for (int j = 0; j <= v.accepted; ++j) {
        const int32_t token = j < v.accepted ? draft_span[j] : v.token;
        emitted[j] =
            GreedyResult(std::span<const float>(fwd.logits).subspan(j * n_vocab, n_vocab), token);
        RETURN_IF_ERROR(sampler.Accept(token));
      }
      n_emit = v.accepted + 1;
    } else {
      ASSIGN_OR_RETURN(n_emit, VerifyWithSampler(sampler, fwd.logits, draft_span, emitted));
    }
    const int accepted = n_emit - 1;
    if (k > 0) {
      ++result.stats.draft_steps;
      result.stats.draft_tokens += k;
      result.stats.accepted_tokens += accepted;
      for (int j = 0; j < k; ++j) ++result.stats.drafted_at[j];
      for (int j = 0; j < accepted; ++j) ++result.stats.accepted_at[j];
    }
    // A stop token inside the accepted run ends the generation there.
    for (int j = 0; j < n_emit; ++j) {
      if (is_stop(emitted[j].token)) {
        n_emit = j + 1;
        result.stopped = true;
        break;
      }
    }
    result.tokens.insert(result.tokens.end(), emitted.begin(), emitted.begin() + n_emit);
    result.stats.emitted_tokens += n_emit;
    if (on_tokens) keep_going = on_tokens({emitted.data(), static_cast<size_t>(n_emit)});
    // Rollback (spec 5.6.4): positions n_past .. n_past + accepted hold id_last and the accepted
    // drafts; the rejected rows' target KV is dropped. The heads catch up over exactly the
    // accepted rows, which leaves their KV and pending_h as process-then-rollback would.
    seq_blocks.Truncate(n_past + accepted + 1);
    if (drafter_ != nullptr && keep_going && !result.stopped &&
        static_cast<int>(result.tokens.size()) < max_new_tokens) {
      RETURN_IF_ERROR(catch_up(std::span<const int32_t>(rows.data(), accepted + 1),
                               std::span<const float>(fwd.hidden.data(), (accepted + 1) * d)));
    }
    n_past += accepted + 1;
    id_last = emitted[accepted].token;
  }
  return result;
}

}  // namespace stepserve::spec
