#include "engine/runtime/kv_sizing.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_format.h"
#include "engine/model/kv_storage.h"

namespace stepserve::engine {
namespace {

// Without a budget: room for every running sequence at full context, but no more than 1 GiB
// beyond one full context (the host allocation is zero-filled up front).
constexpr uint64_t kDefaultBudgetBytes = uint64_t{1} << 30;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::StatusOr<KvSizing> SizeKvCache(const model::Hparams& hparams, const KvSizingInput& input) {
  if (input.block_size <= 0 || input.block_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("block_size must be in [1, 1024], got %d", input.block_size));
  }
  if (input.kv_cache_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kv_cache_blocks must be >= 0, got %d", input.kv_cache_blocks));
  }
  if (!(input.kv_cache_gib >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kv_cache_gib must be >= 0, got %g", input.kv_cache_gib));
  }
  const int64_t bs = input.block_size;
  const uint64_t full_bpp = model::KvStorage::BytesPerPosition(hparams, /*swa=*/false, 0,
                                                               input.end_layer, input.kv_dtype);
  const uint64_t swa_bpp =
      model::KvStorage::BytesPerPosition(hparams, /*swa=*/true, 0, input.end_layer, input.kv_dtype);
  KvSizing sizing;
  if (swa_bpp > 0 && hparams.sliding_window > 0) {
    // Per sequence: the window plus slack, plus the block a position straddles and the block
    // being filled. Prompt chunks of one step add at most max_step_tokens positions in total.
    const int64_t per_seq = CeilDiv(hparams.sliding_window + input.rollback_slack, bs) + 2;
    const int64_t blocks = per_seq * input.max_running + CeilDiv(input.max_step_tokens, bs);
    sizing.swa_blocks = static_cast<int32_t>(std::min<int64_t>(blocks, 1 << 30));
  }
  const uint64_t swa_bytes = static_cast<uint64_t>(sizing.swa_blocks) * bs * swa_bpp;
  int64_t full_blocks = 0;
  if (full_bpp == 0) {
    full_blocks = 0;
  } else if (input.kv_cache_blocks > 0) {
    full_blocks = input.kv_cache_blocks;
  } else if (input.kv_cache_gib > 0) {
    const double budget = input.kv_cache_gib * static_cast<double>(uint64_t{1} << 30);
    const double left = budget - static_cast<double>(swa_bytes);
    full_blocks = left > 0 ? static_cast<int64_t>(left / static_cast<double>(bs * full_bpp)) : 0;
    if (full_blocks < 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "kv_cache_gib %g is too small: the sliding-window layers alone need %d bytes for "
          "max_running %d sequences, and one full-attention block needs %d more",
          input.kv_cache_gib, swa_bytes, input.max_running, bs * full_bpp));
    }
  } else {
    const int64_t all_at_full_context = input.ctx_size * input.max_running;
    const int64_t in_budget =
        std::max<int64_t>(input.ctx_size, static_cast<int64_t>(kDefaultBudgetBytes / full_bpp));
    full_blocks = CeilDiv(std::min(all_at_full_context, in_budget), bs);
  }
  if (full_blocks > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the KV cache would need %d blocks; at most %d are supported (raise "
                        "block_size or lower kv_cache_gib / kv_cache_blocks)",
                        full_blocks, std::numeric_limits<int32_t>::max()));
  }
  sizing.full_blocks = static_cast<int32_t>(full_blocks);
  sizing.bytes = static_cast<uint64_t>(full_blocks) * bs * full_bpp + swa_bytes;
  return sizing;
}

}  // namespace stepserve::engine
