#include "engine/kv/block_pool.h"

#include "engine/base/check.h"

namespace stepserve::kv {

BlockPool::BlockPool(int32_t num_blocks) : ref_counts_(num_blocks, 0) {
  STEPSERVE_CHECK(num_blocks >= 0);
  free_.reserve(num_blocks);
  // Hand out low ids first.
  for (BlockId id = num_blocks - 1; id >= 0; --id) free_.push_back(id);
}

std::optional<BlockId> BlockPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  BlockId block = free_.back();
  free_.pop_back();
  ref_counts_[block] = 1;
  return block;
}

void BlockPool::Retain(BlockId block) {
  STEPSERVE_CHECK(block >= 0 && block < capacity(), "block id out of range");
  STEPSERVE_CHECK(ref_counts_[block] > 0, "retain of a free block");
  ++ref_counts_[block];
}

void BlockPool::Release(BlockId block) {
  STEPSERVE_CHECK(block >= 0 && block < capacity(), "block id out of range");
  STEPSERVE_CHECK(ref_counts_[block] > 0, "release of a free block");
  if (--ref_counts_[block] == 0) free_.push_back(block);
}

}  // namespace stepserve::kv
