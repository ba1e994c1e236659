// Weights for full-size speed runs without a model file: every tensor of a synthetic plan
// (engine/synth) placed in backend memory and filled with seeded random valid data of the plan's
// type and scale, generated a slab of rows at a time on the host and replicated on the device.
// Pair it with a headers-only GGUF (`make-model --no-data`, gguf WriteOptions::tensor_data_holes):
// the model binds names, types and shapes from that file and this placer supplies the bytes, so a
// 100 GiB model runs on a host with less RAM and no file of that size.
//
// Replication means rows repeat every slab (a few MiB) - irrelevant for speed: every byte still
// comes from HBM, since the whole model is far larger than L2.
#ifndef STEPSERVE_BENCH_GPU_RANDOM_WEIGHTS_H_
#define STEPSERVE_BENCH_GPU_RANDOM_WEIGHTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/synth/plan.h"

namespace stepserve::bench {

class RandomWeightPlacer {
 public:
  RandomWeightPlacer(synth::ModelPlan plan, uint64_t seed) : plan_(std::move(plan)), seed_(seed) {}

  // Allocates the tensor `name` of the plan (rows padded to 16 bytes, like
  // Backend::PlaceWeight) and fills it; `host` supplies the shape the model bound (checked
  // against the plan). A fused weight ("fused:<part>:...") is filled part by part. NotFound for a
  // tensor the plan lacks.
  absl::StatusOr<WeightView> Place(Backend& backend, const WeightView& host,
                                   std::string_view name);
  uint64_t bytes() const { return bytes_; }

 private:
  // Fills the spec's rows at `dst` (device, `pitch` bytes a row).
  absl::Status FillRows(Backend& backend, const synth::TensorSpec& spec, int64_t pitch,
                        uint8_t* dst);

  synth::ModelPlan plan_;
  uint64_t seed_;
  std::vector<BackendBuffer> buffers_;
  uint64_t bytes_ = 0;
};

}  // namespace stepserve::bench

#endif  // STEPSERVE_BENCH_GPU_RANDOM_WEIGHTS_H_
