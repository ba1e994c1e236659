#include "engine/model/placed_weights.h"

#include "absl/strings/str_format.h"
#include "engine/base/check.h"
#include "engine/base/status_macros.h"

namespace stepserve::model {
namespace {

const WeightView kEmptyView{};

}  // namespace

WeightView HostView(Tensor t) {
  WeightView w;
  if (t == nullptr) return w;
  w.data = t->data;
  w.type = t->type;
  for (int i = 0; i < 4; ++i) w.ne[i] = t->ne[i];
  return w;
}

absl::StatusOr<PlacedWeights> PlacedWeights::Place(Backend& backend, const gguf::GgufFile& file,
                                                   const ModelWeights& weights,
                                                   const LoadProgress& progress,
                                                   const WeightPlacer& placer) {
  PlacedWeights placed;
  const std::vector<gguf::TensorInfo>& tensors = file.tensors();
  placed.first_ = tensors.data();
  placed.views_.resize(tensors.size());
  uint64_t total = 0;
  for (Tensor t : weights.bound_tensors) total += t->nbytes;
  for (Tensor t : weights.bound_tensors) {
    const size_t index = static_cast<size_t>(t - placed.first_);
    STEPSERVE_CHECK(index < tensors.size(), "bound tensor outside the file's tensor table");
    ASSIGN_OR_RETURN(placed.views_[index], placer ? placer(backend, HostView(t), t->name)
                                                  : backend.PlaceWeight(HostView(t), t->name));
    placed.bytes_ += t->nbytes;
    if (progress) progress(placed.bytes_, total, t->name);
  }
  return placed;
}

const WeightView& PlacedWeights::operator[](Tensor t) const {
  if (t == nullptr) return kEmptyView;
  const size_t index = static_cast<size_t>(t - first_);
  STEPSERVE_CHECK(index < views_.size() && views_[index].data != nullptr,
                  "tensor was not placed (not bound by ModelWeights)");
  return views_[index];
}

std::span<const float> PlacedWeights::F32(Tensor t) const {
  if (t == nullptr) return {};
  const WeightView& view = (*this)[t];
  STEPSERVE_CHECK(view.type == GgmlType::kF32, "F32 span of a non-F32 tensor");
  return {static_cast<const float*>(view.data), static_cast<size_t>(t->n_elements())};
}

}  // namespace stepserve::model
