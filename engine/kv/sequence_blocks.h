// The KV block tables of one sequence: one for full-attention layers (every position kept) and
// one for sliding-window layers (only the window plus slack for rolled-back draft tokens kept;
// older blocks are released as the sequence advances, their table slots set to kNoBlock).
// With the prefix cache on, every full computed block is published in both pools and a new
// sequence starts from the longest cached prefix of its tokens (AttachCachedPrefix). Shared
// blocks are always full prefix blocks, so the sequence only ever writes into private blocks.
#ifndef STEPSERVE_ENGINE_KV_SEQUENCE_BLOCKS_H_
#define STEPSERVE_ENGINE_KV_SEQUENCE_BLOCKS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv/block_pool.h"

namespace stepserve::kv {

struct KvGeometry {
  int32_t block_size = 16;
  // Sliding window W: a query at p attends to p' with p - p' < W. 0: no sliding layers.
  int32_t sliding_window = 0;
  // Positions a sequence may roll back (rejected draft tokens); sliding layers keep that much more.
  int32_t rollback_slack = 0;
  bool has_full_layers = true;
  // Share full blocks of identical prefixes (needs full-attention layers: their blocks anchor
  // the content identity that the sliding blocks are published under).
  bool prefix_cache = false;
};

class SequenceBlocks {
 public:
  SequenceBlocks(const KvGeometry& geometry, BlockPool* full_pool, BlockPool* swa_pool);
  ~SequenceBlocks();
  SequenceBlocks(const SequenceBlocks&) = delete;
  SequenceBlocks& operator=(const SequenceBlocks&) = delete;

  // New blocks (full + sliding) that Grow(new_length) would take from the pools.
  int32_t full_blocks_needed(int64_t new_length) const;
  int32_t swa_blocks_needed(int64_t new_length) const;

  // Makes room for positions [length(), new_length). All or nothing: returns false and changes
  // nothing when a pool lacks blocks. Sliding-window blocks that no query of this or a later
  // step can see (allowing for rollback_slack) are released.
  bool Grow(int64_t new_length);
  // Rolls back to `length` (<= length()); blocks past it are released. Rolling back further than
  // the slack into released sliding blocks is a programming error.
  void Truncate(int64_t length);
  // Releases every block, the last first (so the cache evicts a prefix's tail before its head).
  void Clear();

  // On an empty sequence: takes the longest run of cached blocks that starts `tokens`, covers at
  // most `max_length` positions, and that both pools still hold (every full-attention block, and
  // the sliding blocks a query right after it can see). Returns the positions taken (a multiple
  // of the block size; 0 with the prefix cache off); length() becomes that.
  int64_t AttachCachedPrefix(std::span<const int32_t> tokens, int64_t max_length);
  // Publishes the blocks wholly inside the first `computed` positions (their KV is written) that
  // are not published yet; `tokens` holds at least those positions.
  void PublishComputed(std::span<const int32_t> tokens, int64_t computed);

  int64_t length() const { return length_; }
  const std::vector<BlockId>& full_table() const { return full_table_; }
  const std::vector<BlockId>& swa_table() const { return swa_table_; }
  // First position whose sliding-window KV is still held.
  int64_t swa_first_kept_position() const;

 private:
  int64_t BlocksFor(int64_t length) const;
  // Leading sliding blocks that no query at first_query_position or later (after a rollback
  // within the slack) can see.
  int64_t SwaBlocksInvisibleFrom(int64_t first_query_position) const;
  void ReleaseOldSwaBlocks(int64_t first_query_position);
  // Fails if writing positions from `position` on would touch a published (shared) block.
  void CheckPrivateFrom(int64_t position) const;

  KvGeometry geometry_;
  BlockPool* full_pool_;
  BlockPool* swa_pool_;
  int64_t length_ = 0;
  int64_t swa_released_ = 0;  // leading sliding blocks already released
  std::vector<BlockId> full_table_;
  std::vector<BlockId> swa_table_;
  // Per leading full block, considered for the cache in order: its chain hash and its serial in
  // the full pool (0: not published, so its successors are not either).
  std::vector<uint64_t> block_hashes_;
  std::vector<uint64_t> block_serials_;
};

}  // namespace stepserve::kv

#endif  // STEPSERVE_ENGINE_KV_SEQUENCE_BLOCKS_H_
