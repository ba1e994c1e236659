#include "engine/model/placed_weights.h"

#include <cstring>
#include <string>

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

int64_t FusedWeight::OffsetOf(Tensor part) const {
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == part) return offset[i];
  }
  return -1;
}

absl::StatusOr<bool> PlacedWeights::PlaceFused(Backend& backend, const WeightPlacer& placer,
                                               const std::vector<Tensor>& group) {
  if (group.size() < 2) return false;
  for (Tensor t : group) {
    if (t == nullptr || t->type != group[0]->type || t->ne[0] != group[0]->ne[0] ||
        t->ne[2] != 1 || t->ne[3] != 1 || views_[t - first_].data != nullptr) {
      return false;
    }
  }
  FusedWeight fused;
  std::string name = "fused";
  for (Tensor t : group) {
    fused.parts.push_back(t);
    fused.offset.push_back(RoundUpRows(fused.rows));
    fused.rows = fused.offset.back() + t->ne[1];
    name += ":" + t->name;
  }
  fused.rows = RoundUpRows(fused.rows);
  // Rows are contiguous in GGUF tensors (row bytes = RowBytes(type, ne[0])): the parts' bytes go
  // to their first rows; alignment rows stay zero (a zero block dequantizes to zeros). A placer
  // makes its own bytes (WeightPlacer).
  const size_t row_bytes = static_cast<size_t>(RowBytes(group[0]->type, group[0]->ne[0]));
  std::vector<uint8_t> host(placer ? 0 : static_cast<size_t>(fused.rows) * row_bytes, 0);
  for (size_t i = 0; i < group.size() && !placer; ++i) {
    std::memcpy(host.data() + fused.offset[i] * row_bytes, group[i]->data, group[i]->nbytes);
  }
  WeightView view = HostView(group[0]);
  if (!placer) view.data = host.data();
  view.ne[1] = fused.rows;
  ASSIGN_OR_RETURN(fused.view, placer ? placer(backend, view, name)
                                      : backend.PlaceWeight(view, name));
  if (!placer && fused.view.data == host.data()) fused_host_.push_back(std::move(host));
  const int64_t placed_row_bytes = fused.view.row_bytes();
  for (size_t i = 0; i < group.size(); ++i) {
    WeightView part = fused.view;
    part.data = static_cast<const uint8_t*>(fused.view.data) + fused.offset[i] * placed_row_bytes;
    part.ne[1] = group[i]->ne[1];
    part.row_stride = placed_row_bytes;
    views_[group[i] - first_] = part;
  }
  fused_by_first_[group[0] - first_] = static_cast<int32_t>(fused_.size());
  fused_.push_back(std::move(fused));
  return true;
}

absl::StatusOr<PlacedWeights> PlacedWeights::Place(Backend& backend, const gguf::GgufFile& file,
                                                   const ModelWeights& weights,
                                                   const LoadProgress& progress,
                                                   const WeightPlacer& placer,
                                                   std::span<const std::vector<Tensor>> fuse) {
  PlacedWeights placed;
  const std::vector<gguf::TensorInfo>& tensors = file.tensors();
  placed.first_ = tensors.data();
  placed.views_.resize(tensors.size());
  placed.fused_by_first_.assign(tensors.size(), -1);
  placed.fused_.reserve(fuse.size());  // Fused() hands out pointers into it
  uint64_t total = 0;
  for (Tensor t : weights.bound_tensors) total += t->nbytes;
  for (const std::vector<Tensor>& group : fuse) {
    ASSIGN_OR_RETURN(const bool fused, placed.PlaceFused(backend, placer, group));
    if (!fused) continue;
    for (Tensor t : group) placed.bytes_ += t->nbytes;
    if (progress) progress(placed.bytes_, total, group.back()->name);
  }
  for (Tensor t : weights.bound_tensors) {
    const size_t index = static_cast<size_t>(t - placed.first_);
    STEPSERVE_CHECK(index < tensors.size(), "bound tensor outside the file's tensor table");
    if (placed.views_[index].data != nullptr) continue;  // placed as part of a fused weight
    ASSIGN_OR_RETURN(placed.views_[index], placer ? placer(backend, HostView(t), t->name)
                                                  : backend.PlaceWeight(HostView(t), t->name));
    placed.bytes_ += t->nbytes;
    if (progress) progress(placed.bytes_, total, t->name);
  }
  return placed;
}

const FusedWeight* PlacedWeights::Fused(Tensor first) const {
  if (first == nullptr) return nullptr;
  const size_t index = static_cast<size_t>(first - first_);
  if (index >= fused_by_first_.size() || fused_by_first_[index] < 0) return nullptr;
  return &fused_[static_cast<size_t>(fused_by_first_[index])];
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
