// Step35Model::Rows: the activation scratch of the forward pass, shared by the model's files
// (step35_model.cc: layers and steps; step35_logits.cc: logits and their top entries). Private to
// engine/model.
#ifndef STEPSERVE_ENGINE_MODEL_STEP35_ROWS_H_
#define STEPSERVE_ENGINE_MODEL_STEP35_ROWS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "engine/base/check.h"
#include "engine/model/step35_model.h"

namespace stepserve::model {

// One activation matrix of scratch: backend memory for Rows::capacity rows of `width` 4-byte
// elements (0: unused by this model, never allocated).
struct Slot {
  BackendBuffer buffer;
  int64_t width = 0;
};

struct Step35Model::Rows {
  int64_t n = 0;
  std::vector<int32_t> ids;
  std::vector<int32_t> positions;
  std::vector<SequenceSlice> full_seqs, swa_seqs;
  int64_t capacity = 0;  // rows every slot holds
  Slot h, a, q, k, v, o, gate, tmp, f, ff_g, ff_u, router, cat, expert_ids, expert_weights;
  // A residual update not yet added into h: the attention output or the (shared-expert or dense)
  // FFN's down projection, both in tmp. The next norm adds it as it normalises (AddRmsNorm: one
  // kernel instead of two); FlushResidual adds it where no norm follows. data == nullptr: none.
  TensorView pending;
  Slot fused;  // outputs of a fused matmul (FusedWeight), read through strided views
  // Non-host-visible backends only: logits before they are downloaded, grow-only; and the
  // LogitsTopK outputs (ids, values, argmax, log-sum-exp back to back), grow-only.
  BackendBuffer logits;
  BackendBuffer candidates;
  std::vector<uint8_t> candidates_host;  // the downloaded candidates before they are split

  std::array<Slot*, 16> slots() {
    return {&h, &a,    &q,    &k,      &v,   &o,          &gate,           &tmp,
            &f, &ff_g, &ff_u, &router, &cat, &expert_ids, &expert_weights, &fused};
  }
  // A packed F32 matrix of `rows_count` rows of `cols` in `slot` (sized by EnsureRowCapacity).
  TensorView Mat(const Slot& slot, int64_t cols, int64_t rows_count) const {
    STEPSERVE_CHECK(cols <= slot.width && rows_count <= capacity, "activation scratch too small");
    return TensorView::F32(slot.buffer.f32(), cols, rows_count);
  }
  // Columns [begin, begin + cols) of a packed matrix of `stride` columns in `slot`.
  TensorView Cols(const Slot& slot, int64_t stride, int64_t begin, int64_t cols,
                  int64_t rows_count) const {
    STEPSERVE_CHECK(begin + cols <= stride && stride <= slot.width && rows_count <= capacity,
                    "activation scratch too small");
    return TensorView::F32(slot.buffer.f32() + begin, cols, rows_count, stride);
  }
};

}  // namespace stepserve::model

#endif  // STEPSERVE_ENGINE_MODEL_STEP35_ROWS_H_
