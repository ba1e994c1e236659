// Seeded contents of a planned tensor. Deterministic for (seed, tensor name) and independent of the
// thread count: the tensor is cut into fixed chunks of whole rows, each generated from its own
// derived seed, and threads only decide who computes which chunk.
#ifndef STEPSERVE_ENGINE_SYNTH_FILL_H_
#define STEPSERVE_ENGINE_SYNTH_FILL_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/synth/plan.h"

namespace stepserve::synth {

// Writes the tensor's `spec.nbytes()` bytes at `dst` (`nbytes` must equal that). Quantizable
// types (QuantizeRow) get gaussian floats of the spec's RMS, rounded to the type; other block
// types get FillRandomBlocks blocks of that RMS. `rope_freqs` feeds FillKind::kRopeFreqs.
// `threads` <= 0 means one per hardware thread.
absl::Status FillTensor(const TensorSpec& spec, const std::vector<float>& rope_freqs, uint64_t seed,
                        int threads, uint8_t* dst, uint64_t nbytes);

// The per-tensor seed (exposed so tests and device-side fills can reproduce it).
uint64_t TensorSeed(uint64_t seed, std::string_view name);

}  // namespace stepserve::synth

#endif  // STEPSERVE_ENGINE_SYNTH_FILL_H_
