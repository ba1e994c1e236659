// A plain, obviously-correct model of the sampling chain for tests: doubles, full sorts, no
// incremental state. The optimised Sampler (and later the CUDA sampler) are compared against it.
#ifndef STEPSERVE_TESTS_ENGINE_SAMPLING_SAMPLING_REFERENCE_H_
#define STEPSERVE_TESTS_ENGINE_SAMPLING_SAMPLING_REFERENCE_H_

#include <cstdint>
#include <random>
#include <vector>

#include "engine/sampling/sampling_params.h"

namespace stepserve::testing {

// The distribution the chain of sampling_params.h defines for `logits` after the sequence
// `history` (prompt + generated tokens, oldest first). Greedy gives a one-hot vector.
std::vector<double> ReferenceDistribution(const std::vector<float>& logits,
                                          const SamplingParams& params,
                                          const std::vector<int32_t>& history);

// Logits after bias and penalties only (the formulas written out directly).
std::vector<double> ReferencePenalised(const std::vector<float>& logits,
                                       const SamplingParams& params,
                                       const std::vector<int32_t>& history);

std::vector<float> RandomLogits(std::mt19937_64& rng, int vocab, float scale);

}  // namespace stepserve::testing

#endif  // STEPSERVE_TESTS_ENGINE_SAMPLING_SAMPLING_REFERENCE_H_
