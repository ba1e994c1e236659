// A fixed pool of KV-cache blocks with reference counts. A block holds `block_size` token
// positions for every layer of one attention kind (full or sliding); the device memory behind
// block ids is owned by the backend. Blocks are shared between sequences by the prefix cache,
// hence the counts. Single-threaded: the engine thread owns it.
#ifndef STEPSERVE_ENGINE_KV_BLOCK_POOL_H_
#define STEPSERVE_ENGINE_KV_BLOCK_POOL_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace stepserve::kv {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  // A free block with reference count 1, or nullopt when none is free.
  std::optional<BlockId> Allocate();
  // Adds a reference to an allocated block (sharing).
  void Retain(BlockId block);
  // Drops a reference; the block returns to the free list at zero.
  void Release(BlockId block);

  int32_t capacity() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return capacity() - num_free(); }
  int32_t ref_count(BlockId block) const { return ref_counts_[block]; }

 private:
  std::vector<int32_t> ref_counts_;
  std::vector<BlockId> free_;  // LIFO: recently freed blocks are reused first (warm in cache)
};

}  // namespace stepserve::kv

#endif  // STEPSERVE_ENGINE_KV_BLOCK_POOL_H_
