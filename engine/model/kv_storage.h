// Backend memory for the paged KV cache of a range of layers: per layer a K and a V array of
// `num_blocks` pages (layout in kernels/attention/paged_attention.h). Full-attention layers draw
// pages from the full pool's ids, sliding-window layers (MTP layers included) from the sliding
// pool's ids, so one pair of block tables per sequence addresses every layer. The pages come from
// the backend the model runs on (Step35Model::backend()); the storage must not outlive it.
#ifndef STEPSERVE_ENGINE_MODEL_KV_STORAGE_H_
#define STEPSERVE_ENGINE_MODEL_KV_STORAGE_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/model/hparams.h"

namespace stepserve::model {

// "f32", "f16" or "q8_0" (F16 halves the cache, Q8_0 takes 34 bytes per 32 values; Q8_0 needs
// head dims that are multiples of 32 and a backend that supports it, Backend::SupportsKvDtype).
absl::StatusOr<KvDtype> KvDtypeFromName(std::string_view name);
std::string_view KvDtypeName(KvDtype dtype);

struct KvStorageOptions {
  KvDtype dtype = KvDtype::kF32;
  int32_t block_size = 16;
  int32_t full_blocks = 0;  // pages per full-attention layer
  int32_t swa_blocks = 0;   // pages per sliding-window layer
  int first_layer = 0;      // layer range [first_layer, end_layer)
  int end_layer = -1;       // -1: every layer (trunk and MTP)
};

class KvStorage {
 public:
  // Allocates on `backend` and zero-fills; ResourceExhausted naming the bytes wanted and the
  // bytes the backend reports free when the pages do not fit.
  static absl::StatusOr<KvStorage> Create(Backend& backend, const Hparams& hparams,
                                          const KvStorageOptions& options);

  // The cache view of layer `il` (which must be in the range).
  KvCacheView layer(int il);
  int32_t block_size() const { return options_.block_size; }
  uint64_t bytes() const { return bytes_; }
  // Bytes per token position summed over full-attention / sliding-window layers.
  static uint64_t BytesPerPosition(const Hparams& hparams, bool swa, int first_layer, int end_layer,
                                   KvDtype dtype = KvDtype::kF32);

 private:
  KvStorageOptions options_;
  std::vector<KvCacheView> views_;      // indexed by il - first_layer
  std::vector<BackendBuffer> buffers_;  // K and V of each layer
  uint64_t bytes_ = 0;
};

}  // namespace stepserve::model

#endif  // STEPSERVE_ENGINE_MODEL_KV_STORAGE_H_
