// The model's weights in backend memory: every tensor ModelWeights bound, passed once through
// Backend::PlaceWeight at load (CPU: the mmap view unchanged; accelerators: a device copy, maybe
// with padded rows). The forward pass looks up placed views here; the host views stay reachable
// through ModelWeights for anything read on the host.
//
//   ASSIGN_OR_RETURN(PlacedWeights placed, PlacedWeights::Place(backend, file, weights, progress));
//   RETURN_IF_ERROR(backend.Matmul(x, placed[w.attn_q], q));
#ifndef STEPSERVE_ENGINE_MODEL_PLACED_WEIGHTS_H_
#define STEPSERVE_ENGINE_MODEL_PLACED_WEIGHTS_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/model/weights.h"

namespace stepserve::model {

// Called after each placed tensor with the bytes placed so far, the total to place, and the
// tensor's name.
using LoadProgress =
    std::function<void(uint64_t bytes_done, uint64_t bytes_total, std::string_view tensor)>;

// Replaces Backend::PlaceWeight for every tensor when set: gets the backend, the host view (shape,
// type; its bytes may be a hole of a headers-only file) and the name, and returns a view of
// memory it owns for the model's lifetime. Benchmarks use it to fill full-size models with random
// weights on the device (bench/gpu/random_weights.h).
using WeightPlacer = std::function<absl::StatusOr<WeightView>(
    Backend& backend, const WeightView& host, std::string_view name)>;

// The host view of a GGUF tensor (an empty view for nullptr).
WeightView HostView(Tensor t);

class PlacedWeights {
 public:
  // Places weights.bound_tensors in file order (sequential reads of the mapping). Errors from
  // PlaceWeight (ResourceExhausted naming the tensor) are returned as they are.
  static absl::StatusOr<PlacedWeights> Place(Backend& backend, const gguf::GgufFile& file,
                                             const ModelWeights& weights,
                                             const LoadProgress& progress,
                                             const WeightPlacer& placer = {});

  // The placed view of a bound tensor of this file; an empty view for nullptr.
  const WeightView& operator[](Tensor t) const;
  // A placed F32 vector (router bias, rope factors) as a span over backend memory; empty for
  // nullptr.
  std::span<const float> F32(Tensor t) const;
  uint64_t bytes() const { return bytes_; }

 private:
  const gguf::TensorInfo* first_ = nullptr;  // file.tensors().data(): Tensor -> index
  std::vector<WeightView> views_;            // indexed like file.tensors(); unbound: empty
  uint64_t bytes_ = 0;
};

}  // namespace stepserve::model

#endif  // STEPSERVE_ENGINE_MODEL_PLACED_WEIGHTS_H_
