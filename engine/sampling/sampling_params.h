// Per-request sampling parameters (the engine-side mirror of proto SamplingParams) and their
// validation. Defaults mean "off" for every transformation, so a default-constructed struct samples
// from the plain softmax at temperature 1.
//
// Order of operations (llama.cpp's default chain and vLLM's processor order agree on it; the
// research notes in shared/research/anchors-serving.md do not prescribe one):
//   1. logit bias        z[t] += logit_bias[t]   (-inf bans a token)
//   2. penalties         over the last penalty_last_n tokens of the sequence (prompt included):
//                          repetition: z > 0 ? z / r : z * r          (CTRL / llama.cpp)
//                          presence/frequency: z -= count * f + (count > 0) * p   (OpenAI)
//   3. temperature       z /= T; T == 0 (or below kGreedyTemperature) means greedy argmax
//   4. top-k             keep the k largest (ties: lower token id ranks higher)
//   5. top-p             keep the smallest prefix (same order) whose mass, renormalised over the
//                        top-k survivors, reaches top_p
//   6. min-p             keep tokens with p >= min_p * p_max
//   7. sample            inverse CDF over the survivors in ascending token id order, driven by a
//                        uniform keyed by (seed, generation index); see counter_rng.h
#ifndef STEPSERVE_ENGINE_SAMPLING_SAMPLING_PARAMS_H_
#define STEPSERVE_ENGINE_SAMPLING_SAMPLING_PARAMS_H_

#include <cstdint>
#include <map>

#include "absl/status/status.h"

namespace stepserve {

// Temperatures below this are treated as greedy: z / T would overflow float for ordinary logits
// long before T reaches 0, and vLLM uses the same cut-off (_SAMPLING_EPS).
inline constexpr float kGreedyTemperature = 1e-5f;
// OpenAI's and vLLM's limit on top_logprobs; SampleResult keeps them in a fixed array.
inline constexpr int kMaxLogprobs = 20;
// OpenAI's range for logit_bias values; -inf is additionally accepted as "ban this token".
inline constexpr float kMaxAbsLogitBias = 100.0f;
// OpenAI's range for presence_penalty and frequency_penalty.
inline constexpr float kMaxAbsPresenceFrequency = 2.0f;

struct SamplingParams {
  float temperature = 1.0f;         // >= 0; 0 = greedy
  int32_t top_k = 0;                // [0, vocab]; 0 = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  float presence_penalty = 0.0f;    // [-2, 2]; 0 = off
  float frequency_penalty = 0.0f;   // [-2, 2]; 0 = off
  // How many of the most recent tokens the penalties look at: -1 = the whole sequence, 0 = none
  // (penalties off). Prompt tokens count (llama.cpp convention): the engine feeds them to the
  // Sampler's constructor.
  int32_t penalty_last_n = 64;
  std::map<int32_t, float> logit_bias;  // token id -> additive bias in [-100, 100] or -inf
  // The engine always fills this (a random seed when the request has none) so every draw can be
  // recomputed from (seed, generation index).
  uint64_t seed = 0;
  int32_t n_logprobs = 0;  // [0, kMaxLogprobs]: top alternatives returned with each token
  // Consumed by the stopping logic, not by the sampler (vLLM convention): EOS may still be sampled,
  // it just does not end the sequence. Ban EOS through logit_bias to forbid it.
  bool ignore_eos = false;

  bool IsGreedy() const { return temperature < kGreedyTemperature; }
  bool HasPenalties() const {
    return penalty_last_n != 0 &&
           (repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f);
  }

  // InvalidArgument naming the first bad field and its allowed range, e.g.
  // "top_p must be in (0, 1], got 1.5". vocab_size bounds top_k and logit_bias token ids.
  absl::Status Validate(int vocab_size) const;
};

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_SAMPLING_SAMPLING_PARAMS_H_
