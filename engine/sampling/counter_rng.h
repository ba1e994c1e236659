// Counter-based random numbers for sampling: every uniform is a pure function of
// (seed, generation index, stream), so a draw does not depend on batch composition, on how many
// other draws happened before it, or on which device computes it, and speculative verification
// can re-derive exactly the draw that non-speculative decoding would have made at that position.
//
// The mixer is SplitMix64's output function (Steele, Lea, Flood 2014), itself a counter-mode
// generator, chained over the three key parts; a few integer ops, cheap on CPU and GPU alike.
#ifndef STEPSERVE_ENGINE_SAMPLING_COUNTER_RNG_H_
#define STEPSERVE_ENGINE_SAMPLING_COUNTER_RNG_H_

#include <cstdint>

namespace stepserve {

// Independent streams at the same (seed, index). kSample is the one ordinary decoding uses, so a
// speculative path that draws its tokens from kSample reproduces non-speculative output exactly.
enum class RngStream : uint64_t {
  kSample = 0,    // the token draw (inverse CDF)
  kAccept = 1,    // speculative acceptance test u < p/q
  kResidual = 2,  // speculative resample from norm(max(0, p - q))
};

inline uint64_t SplitMix64Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t CounterRandom64(uint64_t seed, uint64_t index, RngStream stream) {
  return SplitMix64Mix(SplitMix64Mix(SplitMix64Mix(seed) ^ index) ^ static_cast<uint64_t>(stream));
}

// Uniform in [0, 1) with 53 random bits.
inline double CounterUniform(uint64_t seed, uint64_t index, RngStream stream) {
  return static_cast<double>(CounterRandom64(seed, index, stream) >> 11) * 0x1.0p-53;
}

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_SAMPLING_COUNTER_RNG_H_
