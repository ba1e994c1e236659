// The per-sequence sampler (CPU reference; the CUDA sampler is tested against it). It owns the
// request's SamplingParams, the penalty window and the generation index that keys the RNG, plus
// work buffers sized once for the vocabulary so Sample() does not allocate.
//
// Reproducibility: the draw for the token at generation index i (0 = first generated token) uses
// CounterUniform(seed, i, kSample) only, so it is independent of batching and can be recomputed
// at verification time (speculative.h). The order of operations is documented in
// sampling_params.h.
//
// Logprobs follow vLLM's default (logprobs_mode = raw_logprobs): they are log-softmax of the
// model's raw logits, before logit bias, penalties, temperature and truncation, for the sampled
// token and for the top-n alternatives. They therefore describe the model, not the sampling rule,
// and are the same whichever params a client picks.
#ifndef STEPSERVE_ENGINE_SAMPLING_SAMPLER_H_
#define STEPSERVE_ENGINE_SAMPLING_SAMPLER_H_

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/sampling/logits_ops.h"
#include "engine/sampling/penalty_history.h"
#include "engine/sampling/sampling_params.h"

namespace stepserve {

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;                          // raw log-softmax of `token` (see above)
  int32_t n_top = 0;                             // params.n_logprobs entries of `top` are filled
  std::array<TokenLogprob, kMaxLogprobs> top{};  // largest raw logprobs first, ties lower id

  std::span<const TokenLogprob> top_logprobs() const { return {top.data(), size_t(n_top)}; }
};

class Sampler {
 public:
  // Validates params against vocab_size and the prompt ids, then pushes the prompt into the
  // penalty window (prompt tokens count towards penalties, as in llama.cpp).
  static absl::StatusOr<Sampler> Create(SamplingParams params, int vocab_size,
                                        std::span<const int32_t> prompt = {});

  // Draws the token at generation_index(), then Accept()s it.
  absl::StatusOr<SampleResult> Sample(std::span<const float> logits);

  // The draw Sample() would make at generation index `index`, without changing the sequence state.
  absl::StatusOr<SampleResult> SampleAt(std::span<const float> logits, uint64_t index);

  // Whether the top `k` entries of a logits row (with its argmax and log-sum-exp, computed where
  // the logits are: Step35Model's ForwardOptions::logit_top_k) decide this sampler's next draw
  // exactly: greedy, no logit_bias and no penalties (either could move the argmax), and at most k
  // logprobs asked for.
  bool CandidatesSuffice(int32_t k) const;
  // Sample() for such a sampler from the row's top entries (ids/values largest first, ties to the
  // lower id; at least n_logprobs of them): the same token and alternatives as Sample on the full
  // row; logprobs use the given log-sum-exp. Then Accept()s the token. NaN logits outside the
  // candidates go unnoticed here (Sample would reject the row).
  absl::StatusOr<SampleResult> SampleFromCandidates(std::span<const int32_t> ids,
                                                    std::span<const float> values,
                                                    int32_t argmax, float log_sum_exp);

  // Appends a token to the sequence: it enters the penalty window and the generation index
  // advances. Sample() calls this; the engine calls it for tokens decided elsewhere.
  absl::Status Accept(int32_t token);

  // The final distribution Sample() draws from (after every step of the chain) written to probs
  // (size vocab_size): zero for excluded tokens, one-hot at the argmax for greedy. For tests and
  // for speculative acceptance with non-one-hot drafts.
  absl::Status Distribution(std::span<const float> logits, std::span<float> probs);

  uint64_t generation_index() const { return generation_index_; }
  const SamplingParams& params() const { return params_; }
  int vocab_size() const { return vocab_size_; }

 private:
  struct Candidate {
    float z;
    int32_t id;
  };

  Sampler(SamplingParams params, int vocab_size);

  // Runs the chain up to truncation on `logits`. Afterwards either greedy_token_ is set (greedy),
  // or full_vocab_ is true and weights_ holds exp(z - max) for the whole vocabulary, or cand_
  // holds the surviving tokens in ascending id order with their weights in cand_[i].z.
  // weight_total_ is the weights' sum in ascending id order.
  absl::Status Prepare(std::span<const float> logits);
  void ApplyBiasAndPenalties();
  void Truncate(int32_t n_finite);
  // Makes cand_[0..need) sorted best-first, given cand_[0..sorted_) already is.
  void SortPrefix(size_t need);

  SamplingParams params_;
  int vocab_size_;
  float log_min_p_;  // log(min_p), -inf when min-p is off
  PenaltyHistory history_;
  uint64_t generation_index_ = 0;

  // Work state of the last Prepare().
  std::vector<float> z_;  // processed logits, then (full-vocab case) weights
  std::vector<Candidate> cand_;
  size_t sorted_ = 0;
  int32_t greedy_token_ = -1;
  bool full_vocab_ = false;
  float max_z_ = 0.0f;
  double weight_total_ = 0.0;
};

// Batched entry point: row r of the row-major [samplers.size(), vocab] matrix goes to
// samplers[r] (all with the same vocab size). Each sampler keys its RNG by its own generation
// index, so the result of a row does not depend on the other rows.
absl::Status SampleBatch(std::span<Sampler* const> samplers, std::span<const float> logits,
                         std::span<SampleResult> out);

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_SAMPLING_SAMPLER_H_
