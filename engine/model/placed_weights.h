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
#include <memory>
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
// memory it owns for the model's lifetime. A FusedWeight comes as one call named
// "fused:<part>:<part>..." whose rows are the parts' rows in order, each part starting at a
// multiple of kFusedRowAlign rows. Benchmarks use it to fill full-size models with random
// weights on the device (bench/gpu/random_weights.h).
using WeightPlacer = std::function<absl::StatusOr<WeightView>(
    Backend& backend, const WeightView& host, std::string_view name)>;

// The host view of a GGUF tensor (an empty view for nullptr).
WeightView HostView(Tensor t);

// Matrices multiplied by the same input (q/k/v/gate projections, FFN gate/up) placed as one
// weight whose rows are the parts' rows in order, so one Matmul computes all of them: one launch
// and one activation quantization instead of one per part. The parts' own views point into it.
// Each part starts at a multiple of kFusedRowAlign rows (and the total is one), with zero rows
// between, so every part's output columns start 16-byte aligned for vectorised kernels.
inline constexpr int64_t kFusedRowAlign = 4;
inline int64_t RoundUpRows(int64_t rows) {
  return (rows + kFusedRowAlign - 1) / kFusedRowAlign * kFusedRowAlign;
}

struct FusedWeight {
  WeightView view;              // ne = [in, rows]
  std::vector<Tensor> parts;    // in row order
  std::vector<int64_t> offset;  // first row of each part
  int64_t rows = 0;
  // Row offset of `part` in the fused weight, or -1 when it is not one of the parts.
  int64_t OffsetOf(Tensor part) const;
};

class PlacedWeights {
 public:
  // Places weights.bound_tensors in file order (sequential reads of the mapping). Errors from
  // PlaceWeight (ResourceExhausted naming the tensor) are returned as they are.
  // `fuse`: groups of bound 2-D tensors of one type and input width to place as FusedWeights
  // (groups that do not qualify are placed tensor by tensor). Fusing copies the parts into one
  // host buffer first, which this object keeps when the backend reads host memory in place.
  static absl::StatusOr<PlacedWeights> Place(Backend& backend, const gguf::GgufFile& file,
                                             const ModelWeights& weights,
                                             const LoadProgress& progress,
                                             const WeightPlacer& placer = {},
                                             std::span<const std::vector<Tensor>> fuse = {});

  // The placed view of a bound tensor of this file; an empty view for nullptr.
  const WeightView& operator[](Tensor t) const;
  // A placed F32 vector (router bias, rope factors) as a span over backend memory; empty for
  // nullptr.
  std::span<const float> F32(Tensor t) const;
  // The fused weight whose first part is `first`, or nullptr.
  const FusedWeight* Fused(Tensor first) const;
  uint64_t bytes() const { return bytes_; }

 private:
  // Places one qualifying group; returns false (nothing placed) when it does not qualify.
  absl::StatusOr<bool> PlaceFused(Backend& backend, const WeightPlacer& placer,
                                  const std::vector<Tensor>& group);

  const gguf::TensorInfo* first_ = nullptr;  // file.tensors().data(): Tensor -> index
  std::vector<WeightView> views_;            // indexed like file.tensors(); unbound: empty
  std::vector<FusedWeight> fused_;
  std::vector<int32_t> fused_by_first_;  // indexed like views_: index in fused_, or -1
  std::vector<std::vector<uint8_t>> fused_host_;  // concatenations a host backend reads in place
  uint64_t bytes_ = 0;
};

}  // namespace stepserve::model

#endif  // STEPSERVE_ENGINE_MODEL_PLACED_WEIGHTS_H_
