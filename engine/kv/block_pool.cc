#include "engine/kv/block_pool.h"

#include <algorithm>

#include "engine/base/check.h"

namespace stepserve::kv {

BlockPool::BlockPool(int32_t num_blocks) : ref_counts_(num_blocks, 0), entries_(num_blocks) {
  STEPSERVE_CHECK(num_blocks >= 0);
  free_.reserve(num_blocks);
  // Hand out low ids first.
  for (BlockId id = num_blocks - 1; id >= 0; --id) free_.push_back(id);
}

void BlockPool::CheckId(BlockId block) const {
  STEPSERVE_CHECK(block >= 0 && block < capacity(), "block id out of range");
}

std::optional<BlockId> BlockPool::Allocate() {
  BlockId block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    block = lru_.front();
    Evict(block);
  } else {
    return std::nullopt;
  }
  ref_counts_[block] = 1;
  return block;
}

void BlockPool::Evict(BlockId block) {
  Entry& entry = entries_[block];
  lru_.erase(entry.lru_position);
  by_key_.erase(entry.key);
  entry = Entry{};
}

void BlockPool::Retain(BlockId block) {
  CheckId(block);
  if (ref_counts_[block] == 0) {
    STEPSERVE_CHECK(published(block), "retain of a free block");
    lru_.erase(entries_[block].lru_position);
  }
  ++ref_counts_[block];
}

void BlockPool::Release(BlockId block) {
  CheckId(block);
  STEPSERVE_CHECK(ref_counts_[block] > 0, "release of a free block");
  if (--ref_counts_[block] > 0) return;
  if (published(block)) {
    entries_[block].lru_position = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
}

uint64_t BlockPool::Publish(BlockId block, const BlockContent& content) {
  CheckId(block);
  STEPSERVE_CHECK(ref_counts_[block] > 0, "publish of a free block");
  STEPSERVE_CHECK(!published(block), "block published twice");
  if (by_key_.contains(content.key)) return 0;
  Entry& entry = entries_[block];
  entry.serial = next_serial_++;
  entry.key = content.key;
  entry.parent = content.parent;
  entry.tokens.assign(content.tokens.begin(), content.tokens.end());
  by_key_.emplace(content.key, block);
  return entry.serial;
}

std::optional<BlockId> BlockPool::Find(const BlockContent& content) const {
  auto it = by_key_.find(content.key);
  if (it == by_key_.end()) return std::nullopt;
  const Entry& entry = entries_[it->second];
  if (entry.parent != content.parent || !std::equal(entry.tokens.begin(), entry.tokens.end(),
                                                    content.tokens.begin(), content.tokens.end())) {
    return std::nullopt;  // a hash collision: the key matches, the content does not
  }
  return it->second;
}

}  // namespace stepserve::kv
