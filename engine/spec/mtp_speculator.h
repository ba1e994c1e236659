// MTP speculative decoding with the step35 models' own nextn heads (spec: shared/spec/
// step35-architecture.md section 5, shared/spec/mtp-speculative-decoding.md).
//
// Two layers:
//  * MtpDrafter: stateless across sequences. Per-sequence state (pending_h, the accepted length of
//    the heads' KV, the last batch's target hiddens) lives in caller-owned MtpSequenceState, and
//    every call takes a ragged list of sequences, so a batched engine drafts for all of its
//    sequences in one call (one ForwardMtp per head per step over every sequence).
//  * SpeculativeGenerator: the single-sequence loop {draft k, verify 1 + k rows in one target
//    forward, accept, roll back, catch up} for `stepserve generate --draft` and tests.
//
// KV: every MTP head is layer n_layer + head with its own K/V arrays (KvStorage), addressed by the
// sequence's own block tables (the pages ids of the target's SequenceBlocks). With the heads in
// the target file the drafter uses the target's KvStorage; with a separate MTP-only draft file it
// uses a KvStorage of the draft model over layers [n_layer, n_layer + n_mtp) with the same number
// of pages (DraftKvOptions), so the same tables address it.
//
//   ASSIGN_OR_RETURN(auto drafter, MtpDrafter::Create(*target, draft_or_null, {.n_max = 3}));
//   // after every target batch of a sequence (prompt chunk or accepted verification rows):
//   RETURN_IF_ERROR(drafter->CatchUp(items, kv));      // spec 5.4
//   RETURN_IF_ERROR(drafter->Draft(draft_items, kv, &drafts));  // spec 5.5
//
// Usage of the loop:
//   ASSIGN_OR_RETURN(auto gen, SpeculativeGenerator::Create(target.get(), draft.get(), {}));
//   ASSIGN_OR_RETURN(GenerationResult r, gen->Generate(prompt, params, 64));
#ifndef STEPSERVE_ENGINE_SPEC_MTP_SPECULATOR_H_
#define STEPSERVE_ENGINE_SPEC_MTP_SPECULATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/kv_storage.h"
#include "engine/model/step35_model.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/sampling_params.h"

namespace stepserve::spec {

enum class MtpMode {
  kAuto,       // chain when the draft model has > 1 head, recurrent with 1 (spec 5.1)
  kChain,      // head i drafts position n_past + i + 1; n_max clamped to the head count
  kRecurrent,  // head 0 fed with its own output hidden (spec 5.5, single-head mode)
};

struct MtpDrafterOptions {
  MtpMode mode = MtpMode::kAuto;
  int n_max = 3;       // most drafts per step (chain mode: at most the number of heads)
  int n_min = 0;       // drafts shorter than this are dropped (llama.cpp --spec-draft-n-min)
  float p_min = 0.0f;  // stop when the top candidate's probability among the top 10 is below
};

// What the drafter carries for one sequence between calls. Start with Reset(n_embd).
struct MtpSequenceState {
  // Positions [0, n_cached) of every head's KV hold accepted tokens computed from target hiddens;
  // the next CatchUp starts at n_cached, and n_cached is the n_past drafting starts from.
  int64_t n_cached = 0;
  // Target h_final at position n_cached - 1 (all zeros at n_cached == 0, spec 5.2 engine rule).
  std::vector<float> pending_h;
  // verify_h of spec 5.4: target hiddens of the rows of the last CatchUp, the first at position
  // verify_start. Rollback picks the new pending_h from them.
  int64_t verify_start = 0;
  std::vector<float> verify_h;

  void Reset(int64_t n_embd);
};

// One sequence's rows of a target batch, to be caught up on every head (spec 5.4).
struct CatchUpItem {
  MtpSequenceState* state = nullptr;
  std::span<const int32_t> tokens;       // rows at positions state->n_cached, ...
  std::span<const float> target_hidden;  // [tokens.size()][n_embd]: target h_final of the rows
  std::span<const int32_t> full_table;   // block tables covering n_cached + tokens.size()
  std::span<const int32_t> swa_table;
};

// One sequence to draft for (spec 5.5): id_last sits at position state->n_cached (= n_past).
struct DraftItem {
  MtpSequenceState* state = nullptr;
  int32_t id_last = -1;
  int max_tokens = 0;                   // per-sequence cap (remaining budget, context), <= n_max
  std::span<const int32_t> full_table;  // block tables covering n_past + max_tokens positions
  std::span<const int32_t> swa_table;
};

struct DraftTokens {
  std::vector<int32_t> tokens;  // d_1 .. d_k (empty: no draft this step)
  std::vector<float> top_prob;  // probability of each d_j among its head's top 10 candidates
};

class MtpDrafter {
 public:
  // `target` verifies; `draft` is a separately loaded MTP-only (or combined) model whose heads
  // draft, or null to draft with the target's own heads. Errors: no MTP heads, n_vocab / n_embd
  // mismatch between the models, bad options.
  static absl::StatusOr<std::unique_ptr<MtpDrafter>> Create(const model::Step35Model& target,
                                                            model::Step35Model* draft,
                                                            const MtpDrafterOptions& options);
  // Also for a model that is only a draft (no target check).
  static absl::StatusOr<std::unique_ptr<MtpDrafter>> CreateForHeads(
      model::Step35Model* heads_model, const MtpDrafterOptions& options);

  // KvStorage options for a separate draft model's heads with the given page counts.
  static model::KvStorageOptions DraftKvOptions(const model::Hparams& draft_hparams,
                                                int32_t block_size, int32_t full_blocks,
                                                int32_t swa_blocks);

  // Spec 5.4: for each head, decodes every item's rows; row t pairs token t with the target
  // hidden of row t - 1 (row 0 with pending_h). Then verify_h = the rows' target hiddens,
  // pending_h = the last one, n_cached += rows. `kv` holds the heads' layers. Catching up only
  // the accepted rows of a verification batch is the same as catching up all of them and
  // rolling back (attention is causal), and cheaper.
  absl::Status CatchUp(std::span<const CatchUpItem> items, model::KvStorage& kv);

  // Spec 5.6.4/5.6.5 when CatchUp ran over rows later rejected: keeps positions
  // [0, new_length) with new_length in [verify_start + 1, n_cached]; pending_h becomes
  // verify_h at new_length - 1. Heads' KV past new_length is simply rewritten later.
  static absl::Status Rollback(MtpSequenceState& state, int64_t new_length);

  // Spec 5.5: drafts up to min(n_max, item.max_tokens) tokens per item (greedy top candidate,
  // p_min / n_min rules). Chain mode: step i runs head i over i + 1 rows per sequence still
  // drafting; recurrent mode: head 0 over one new row per step. KV rows written at positions
  // >= n_past are scratch: the next CatchUp overwrites them. `out` gets one DraftTokens per item.
  absl::Status Draft(std::span<const DraftItem> items, model::KvStorage& kv,
                     std::vector<DraftTokens>* out);

  MtpMode mode() const { return mode_; }
  int num_heads() const { return num_heads_; }
  int max_draft() const;  // n_max after the chain-mode clamp
  int64_t n_embd() const { return n_embd_; }
  model::Step35Model& heads_model() const { return *heads_; }
  const MtpDrafterOptions& options() const { return options_; }

 private:
  MtpDrafter() = default;

  model::Step35Model* heads_ = nullptr;
  MtpDrafterOptions options_;
  MtpMode mode_ = MtpMode::kChain;
  int num_heads_ = 0;
  int64_t n_embd_ = 0;
  int64_t n_vocab_ = 0;
};

// Counters of one generation (spec mtp-speculative-decoding.md 6.6).
struct SpecStats {
  int64_t target_forwards = 0;  // prefill chunks + decode/verify steps
  int64_t draft_steps = 0;      // verification steps with k >= 1
  int64_t draft_tokens = 0;     // drafts proposed and verified
  int64_t accepted_tokens = 0;  // drafts accepted (bonus/correction tokens not counted)
  int64_t emitted_tokens = 0;
  std::vector<int64_t> drafted_at;   // [j]: steps with k >= j + 1
  std::vector<int64_t> accepted_at;  // [j]: steps whose draft j + 1 was accepted

  double acceptance_rate() const;       // accepted / drafted (llama.cpp "draft acceptance")
  double mean_accepted_length() const;  // 1 + accepted / draft_steps
  std::string ToJson() const;           // one JSON object, no newline
};

struct SpeculativeOptions {
  MtpDrafterOptions drafter;
  bool speculate = true;  // false: plain decoding through the same loop (k = 0)
  int32_t block_size = 16;
  int32_t prefill_chunk = 512;       // prompt rows per target forward
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
  // Tests and experiments (spec mtp-speculative-decoding.md 6.8, oracle / adversarial drafts):
  // when set, the drafts of each step come from here instead of the heads (at most k_cap are
  // used); the heads still catch up on every accepted row. Arguments: n_past, id_last, k_cap.
  std::function<std::vector<int32_t>(int64_t, int32_t, int)> draft_override;
};

struct GenerationResult {
  std::vector<SampleResult> tokens;  // generated tokens (stop token included if hit)
  bool stopped = false;              // ended on a stop token
  SpecStats stats;
};

// Called with each step's emitted tokens (1 + accepted); return false to stop early.
using TokenCallback = std::function<bool(std::span<const SampleResult>)>;

class SpeculativeGenerator {
 public:
  // `draft` null: the target's own MTP heads draft (combined file). The models must outlive
  // the generator.
  static absl::StatusOr<std::unique_ptr<SpeculativeGenerator>> Create(
      model::Step35Model* target, model::Step35Model* draft, const SpeculativeOptions& options);

  // Prefill (target + catch-up), then {draft, verify, accept, roll back, catch up} until
  // max_new_tokens are emitted or a stop token is. Sampled params: tokens equal those plain
  // decoding with the same seed emits (VerifyWithSampler, exact-match acceptance).
  absl::StatusOr<GenerationResult> Generate(std::span<const int32_t> prompt,
                                            const SamplingParams& params, int max_new_tokens,
                                            const TokenCallback& on_tokens = {});

  const MtpDrafter* drafter() const { return drafter_.get(); }

 private:
  SpeculativeGenerator() = default;

  model::Step35Model* target_ = nullptr;
  model::Step35Model* draft_ = nullptr;  // null: heads in the target
  SpeculativeOptions options_;
  std::unique_ptr<MtpDrafter> drafter_;
};

}  // namespace stepserve::spec

#endif  // STEPSERVE_ENGINE_SPEC_MTP_SPECULATOR_H_
