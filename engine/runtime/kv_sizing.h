// How many KV blocks the engine allocates. Full-attention layers keep every position, so their
// pool is the cache's capacity (from kv_cache_blocks, kv_cache_gib or a default). Sliding-window
// layers keep only the window (+ rollback slack) per running sequence, so their pool is sized from
// max_running and the step's token budget instead of from the capacity.
#ifndef STEPSERVE_ENGINE_RUNTIME_KV_SIZING_H_
#define STEPSERVE_ENGINE_RUNTIME_KV_SIZING_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/model/hparams.h"

namespace stepserve::engine {

struct KvSizingInput {
  int64_t ctx_size = 0;  // the engine's context
  double kv_cache_gib = 0;
  int64_t kv_cache_blocks = 0;
  int32_t block_size = 16;
  int32_t max_running = 64;
  int32_t max_step_tokens = 512;
  int32_t rollback_slack = 0;
  int end_layer = 0;  // layers [0, end_layer) get KV
  KvDtype kv_dtype = KvDtype::kF32;
};

struct KvSizing {
  int32_t full_blocks = 0;
  int32_t swa_blocks = 0;
  uint64_t bytes = 0;  // full + sliding
};

// INVALID_ARGUMENT naming kv_cache_gib / kv_cache_blocks / block_size when they cannot work.
absl::StatusOr<KvSizing> SizeKvCache(const model::Hparams& hparams, const KvSizingInput& input);

}  // namespace stepserve::engine

#endif  // STEPSERVE_ENGINE_RUNTIME_KV_SIZING_H_
