// Acceptance rules for speculative (MTP) decoding, shared/spec/mtp-speculative-decoding.md §2.
// The target forward produces 1 + k rows for a request: row j is the target distribution for the
// position after draft d_j (row 0 follows the last committed token). Every rule returns how many
// drafts were accepted (a, 0 <= a <= k) and one more token: the correction at row a when a < k, or
// the bonus from row k when a == k. a + 1 tokens are committed.
#ifndef STEPSERVE_ENGINE_SAMPLING_SPECULATIVE_H_
#define STEPSERVE_ENGINE_SAMPLING_SPECULATIVE_H_

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "engine/sampling/sampler.h"

namespace stepserve {

struct VerifyOutcome {
  int32_t accepted = 0;  // a: drafts accepted
  int32_t token = -1;    // correction (a < k) or bonus (a == k)
};

// §2.2 greedy acceptance on raw logits ([k + 1, vocab] row-major): accept the longest prefix with
// d_j == argmax(row j - 1) (ties to the lower id), then emit argmax(row a).
absl::StatusOr<VerifyOutcome> VerifyGreedy(std::span<const float> target_logits, int vocab,
                                           std::span<const int32_t> drafts);

// §2.3 rejection sampling (Leviathan et al. 2023, Chen et al. 2023) on processed distributions:
// target_probs is [k + 1, vocab] (the post-processing p_j, each row summing to 1), draft_probs is
// [k, vocab] with the distributions q_j the drafts were drawn from, or empty for argmax drafts
// (q_j one-hot at d_j). For j = 1..k: accept d_j if u_j < min(1, p(d_j) / q(d_j)); else emit
// y ~ norm(max(0, p - q)) and stop; if all are accepted emit y ~ p_k. Uniforms are counter-based:
// u_j = (seed, first_index + j - 1, kAccept), the resample uses kResidual at the rejected
// position and the bonus kSample at first_index + k, so every row gets fresh randomness and the
// result can be recomputed. first_index is the generation index of the token row 0 decides.
absl::StatusOr<VerifyOutcome> VerifySampled(std::span<const float> target_probs,
                                            std::span<const float> draft_probs, int vocab,
                                            std::span<const int32_t> drafts, uint64_t seed,
                                            uint64_t first_index);

// The engine's path for argmax drafts (spec §2.3, "draw y ~ p_{j-1}; if y == d_j continue, else
// emit y and stop"): row j is sampled with the sequence's full Sampler chain (penalties see
// d_1..d_j because each accepted token is Accept()ed before the next row), at the generation index
// it would have in ordinary decoding. Greedy params make this §2.2 on processed logits. Because the
// draw at a generation index is fixed, the emitted tokens are exactly those non-speculative
// decoding would emit under the same seed. Writes the a + 1 emitted tokens (with raw logprobs) to
// out (room for k + 1) and returns a + 1; the sampler ends up having accepted them.
absl::StatusOr<int> VerifyWithSampler(Sampler& sampler, std::span<const float> target_logits,
                                      std::span<const int32_t> drafts, std::span<SampleResult> out);

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_SAMPLING_SPECULATIVE_H_
