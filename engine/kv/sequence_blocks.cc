#include "engine/kv/sequence_blocks.h"

#include <algorithm>

#include "engine/base/check.h"
#include "engine/kv/block_hash.h"

namespace stepserve::kv {

SequenceBlocks::SequenceBlocks(const KvGeometry& geometry, BlockPool* full_pool,
                               BlockPool* swa_pool)
    : geometry_(geometry), full_pool_(full_pool), swa_pool_(swa_pool) {
  STEPSERVE_CHECK(geometry.block_size > 0);
  STEPSERVE_CHECK(!geometry.has_full_layers || full_pool != nullptr);
  STEPSERVE_CHECK(geometry.sliding_window == 0 || swa_pool != nullptr);
}

SequenceBlocks::~SequenceBlocks() { Clear(); }

int64_t SequenceBlocks::BlocksFor(int64_t length) const {
  return (length + geometry_.block_size - 1) / geometry_.block_size;
}

int32_t SequenceBlocks::full_blocks_needed(int64_t new_length) const {
  if (!geometry_.has_full_layers) return 0;
  return static_cast<int32_t>(std::max<int64_t>(0, BlocksFor(new_length) - full_table_.size()));
}

int32_t SequenceBlocks::swa_blocks_needed(int64_t new_length) const {
  if (geometry_.sliding_window == 0) return 0;
  return static_cast<int32_t>(std::max<int64_t>(0, BlocksFor(new_length) - swa_table_.size()));
}

bool SequenceBlocks::Grow(int64_t new_length) {
  if (new_length <= length_) return true;
  const int32_t full_needed = full_blocks_needed(new_length);
  const int32_t swa_needed = swa_blocks_needed(new_length);
  // Blocks this step releases from the sliding table could serve it, but only after the step's
  // own queries are done with them; count only what is free now.
  if (full_needed > 0 && full_pool_->num_free() < full_needed) return false;
  if (swa_needed > 0 && swa_pool_->num_free() < swa_needed) return false;
  CheckPrivateFrom(length_);
  for (int32_t i = 0; i < full_needed; ++i) full_table_.push_back(*full_pool_->Allocate());
  for (int32_t i = 0; i < swa_needed; ++i) swa_table_.push_back(*swa_pool_->Allocate());
  const int64_t first_query = length_;
  length_ = new_length;
  if (geometry_.sliding_window > 0) ReleaseOldSwaBlocks(first_query);
  return true;
}

int64_t SequenceBlocks::swa_first_kept_position() const {
  return swa_released_ * geometry_.block_size;
}

int64_t SequenceBlocks::SwaBlocksInvisibleFrom(int64_t first_query_position) const {
  // The earliest query that can still run is first_query_position - rollback_slack (after a
  // rollback); it sees positions >= that - W + 1.
  const int64_t oldest_visible =
      first_query_position - geometry_.rollback_slack - geometry_.sliding_window + 1;
  if (oldest_visible <= 0) return 0;
  return oldest_visible / geometry_.block_size;  // blocks wholly before it
}

void SequenceBlocks::ReleaseOldSwaBlocks(int64_t first_query_position) {
  const int64_t releasable = SwaBlocksInvisibleFrom(first_query_position);
  while (swa_released_ < releasable && swa_released_ < static_cast<int64_t>(swa_table_.size())) {
    swa_pool_->Release(swa_table_[swa_released_]);
    swa_table_[swa_released_] = kNoBlock;
    ++swa_released_;
  }
}

void SequenceBlocks::Truncate(int64_t length) {
  STEPSERVE_CHECK(length >= 0 && length <= length_, "truncate beyond the sequence");
  const int64_t keep = BlocksFor(length);
  // A query at `length` sees sliding positions >= length - W + 1: they must still be held.
  STEPSERVE_CHECK(
      geometry_.sliding_window == 0 ||
          swa_first_kept_position() <= std::max<int64_t>(0, length - geometry_.sliding_window + 1),
      "rollback past the sliding-window slack");
  CheckPrivateFrom(length);
  const size_t whole = static_cast<size_t>(length / geometry_.block_size);
  if (block_hashes_.size() > whole) {
    block_hashes_.resize(whole);
    block_serials_.resize(whole);
  }
  while (static_cast<int64_t>(full_table_.size()) > keep) {
    full_pool_->Release(full_table_.back());
    full_table_.pop_back();
  }
  while (static_cast<int64_t>(swa_table_.size()) > keep) {
    if (swa_table_.back() != kNoBlock) swa_pool_->Release(swa_table_.back());
    swa_table_.pop_back();
  }
  swa_released_ = std::min<int64_t>(swa_released_, swa_table_.size());
  length_ = length;
}

void SequenceBlocks::Clear() {
  for (auto it = full_table_.rbegin(); it != full_table_.rend(); ++it) full_pool_->Release(*it);
  for (auto it = swa_table_.rbegin(); it != swa_table_.rend(); ++it) {
    if (*it != kNoBlock) swa_pool_->Release(*it);
  }
  full_table_.clear();
  swa_table_.clear();
  block_hashes_.clear();
  block_serials_.clear();
  swa_released_ = 0;
  length_ = 0;
}

void SequenceBlocks::CheckPrivateFrom(int64_t position) const {
  // Blocks from the one holding `position` on are written (or released and rewritten later).
  const size_t first = static_cast<size_t>(position / geometry_.block_size);
  for (size_t i = first; i < full_table_.size(); ++i) {
    STEPSERVE_CHECK(!full_pool_->published(full_table_[i]), "write into a shared KV block");
  }
  for (size_t i = first; i < swa_table_.size(); ++i) {
    STEPSERVE_CHECK(swa_table_[i] == kNoBlock || !swa_pool_->published(swa_table_[i]),
                    "write into a shared KV block");
  }
}

int64_t SequenceBlocks::AttachCachedPrefix(std::span<const int32_t> tokens, int64_t max_length) {
  STEPSERVE_CHECK(length_ == 0 && full_table_.empty() && swa_table_.empty(),
                  "a cached prefix attaches to an empty sequence only");
  if (!geometry_.prefix_cache || !geometry_.has_full_layers) return 0;
  const int64_t block_size = geometry_.block_size;
  const int64_t max_blocks =
      std::min<int64_t>(max_length, static_cast<int64_t>(tokens.size())) / block_size;
  // Full-attention blocks: the longest run from the start, each one's parent the previous hit.
  std::vector<BlockId> full_hits;
  std::vector<uint64_t> hashes, serials;
  uint64_t hash = kRootBlockHash;
  uint64_t parent = 0;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const std::span<const int32_t> content = tokens.subspan(i * block_size, block_size);
    hash = ChainBlockHash(hash, content);
    std::optional<BlockId> block = full_pool_->Find({hash, parent, content});
    if (!block.has_value()) break;
    parent = full_pool_->serial(*block);
    full_hits.push_back(*block);
    hashes.push_back(hash);
    serials.push_back(parent);
  }
  int64_t hit_blocks = static_cast<int64_t>(full_hits.size());
  // Sliding blocks are published under the serial of the full block of the same positions. A hit
  // of k blocks needs those a query at k * block_size can see; shorten it until they are there.
  std::vector<BlockId> swa_hits(hit_blocks, kNoBlock);
  if (geometry_.sliding_window > 0) {
    for (int64_t i = 0; i < hit_blocks; ++i) {
      swa_hits[i] = swa_pool_->Find({serials[i], 0, tokens.subspan(i * block_size, block_size)})
                        .value_or(kNoBlock);
    }
    while (hit_blocks > 0) {
      const int64_t first = SwaBlocksInvisibleFrom(hit_blocks * block_size);
      if (std::all_of(swa_hits.begin() + first, swa_hits.begin() + hit_blocks,
                      [](BlockId b) { return b != kNoBlock; })) {
        break;
      }
      --hit_blocks;
    }
  }
  if (hit_blocks == 0) return 0;
  for (int64_t i = 0; i < hit_blocks; ++i) {
    full_pool_->Retain(full_hits[i]);
    full_table_.push_back(full_hits[i]);
  }
  block_hashes_.assign(hashes.begin(), hashes.begin() + hit_blocks);
  block_serials_.assign(serials.begin(), serials.begin() + hit_blocks);
  length_ = hit_blocks * block_size;
  if (geometry_.sliding_window > 0) {
    swa_released_ = SwaBlocksInvisibleFrom(length_);
    swa_table_.assign(hit_blocks, kNoBlock);
    for (int64_t i = swa_released_; i < hit_blocks; ++i) {
      swa_pool_->Retain(swa_hits[i]);
      swa_table_[i] = swa_hits[i];
    }
  }
  return length_;
}

void SequenceBlocks::PublishComputed(std::span<const int32_t> tokens, int64_t computed) {
  if (!geometry_.prefix_cache || !geometry_.has_full_layers) return;
  const int64_t block_size = geometry_.block_size;
  const size_t whole = static_cast<size_t>(std::min(computed, length_) / block_size);
  STEPSERVE_CHECK(static_cast<int64_t>(tokens.size()) >= static_cast<int64_t>(whole) * block_size,
                  "fewer tokens than computed positions");
  while (block_hashes_.size() < whole) {
    const size_t i = block_hashes_.size();
    const uint64_t parent_hash = i == 0 ? kRootBlockHash : block_hashes_[i - 1];
    const uint64_t parent_serial = i == 0 ? 0 : block_serials_[i - 1];
    const std::span<const int32_t> content = tokens.subspan(i * block_size, block_size);
    const uint64_t hash = ChainBlockHash(parent_hash, content);
    uint64_t serial = 0;
    // A block whose parent is not published could never be found: publish chains only.
    if (i == 0 || parent_serial != 0) {
      serial = full_pool_->Publish(full_table_[i], {hash, parent_serial, content});
    }
    if (serial != 0 && geometry_.sliding_window > 0 && swa_table_[i] != kNoBlock) {
      swa_pool_->Publish(swa_table_[i], {serial, 0, content});
    }
    block_hashes_.push_back(hash);
    block_serials_.push_back(serial);
  }
}

}  // namespace stepserve::kv
