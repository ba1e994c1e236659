// A fixed pool of KV-cache blocks with reference counts. A block holds `block_size` token
// positions for every layer of one attention kind (full or sliding); the device memory behind
// block ids is owned by the backend. Single-threaded: the engine thread owns it.
//
// Prefix cache: a full, computed block can be published under a key. Sequences whose prompts
// begin with the same content find it (Find) and share it (Retain). A published block whose last
// reference goes is not freed but parked in an LRU of reusable cached blocks; Allocate takes
// plain free blocks first and evicts the least recently released cached block only when none is
// left. Cached blocks therefore count as free (num_free) for every admission decision.
#ifndef STEPSERVE_ENGINE_KV_BLOCK_POOL_H_
#define STEPSERVE_ENGINE_KV_BLOCK_POOL_H_

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace stepserve::kv {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

// Identifies a published block's content exactly: a lookup key (a content hash) plus what a hit
// must match besides the key, so a hash collision can never hand out the wrong KV. `parent` is the
// serial of the block holding the preceding positions (0 for the first block); serials are never
// reused, so parent + tokens pins down every token of the prefix.
struct BlockContent {
  uint64_t key = 0;
  uint64_t parent = 0;
  std::span<const int32_t> tokens;
};

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  // A block with reference count 1 (a free one, else the oldest cached one, evicted), or nullopt
  // when every block is referenced.
  std::optional<BlockId> Allocate();
  // Adds a reference: to an allocated block (sharing) or to a cached block with no reference
  // (a prefix-cache hit takes it out of the LRU).
  void Retain(BlockId block);
  // Drops a reference; at zero the block is parked in the LRU if published, else freed.
  void Release(BlockId block);

  // Publishes a referenced block under `content`; returns its serial (> 0), or 0 when the key is
  // already taken (the same content computed twice: the first copy stays the shared one).
  uint64_t Publish(BlockId block, const BlockContent& content);
  // The published block matching `content` exactly (key, parent and tokens), if any.
  std::optional<BlockId> Find(const BlockContent& content) const;
  // The block's serial if published, else 0.
  uint64_t serial(BlockId block) const { return entries_[block].serial; }
  bool published(BlockId block) const { return entries_[block].serial != 0; }

  int32_t capacity() const { return static_cast<int32_t>(ref_counts_.size()); }
  // Blocks an allocation can get: never used plus cached without references.
  int32_t num_free() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  int32_t num_used() const { return capacity() - num_free(); }
  // Cached blocks without references (reusable, evicted on demand).
  int32_t num_cached() const { return static_cast<int32_t>(lru_.size()); }
  int32_t ref_count(BlockId block) const { return ref_counts_[block]; }

 private:
  struct Entry {
    uint64_t serial = 0;  // 0: not published
    uint64_t key = 0;
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    std::list<BlockId>::iterator lru_position;  // valid while parked in lru_
  };
  void CheckId(BlockId block) const;
  void Evict(BlockId block);

  std::vector<int32_t> ref_counts_;
  std::vector<BlockId> free_;  // LIFO: recently freed blocks are reused first (warm in cache)
  std::vector<Entry> entries_;
  std::list<BlockId> lru_;  // published blocks without references, least recently released first
  absl::flat_hash_map<uint64_t, BlockId> by_key_;
  uint64_t next_serial_ = 1;
};

}  // namespace stepserve::kv

#endif  // STEPSERVE_ENGINE_KV_BLOCK_POOL_H_
