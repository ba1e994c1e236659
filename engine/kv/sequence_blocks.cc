#include "engine/kv/sequence_blocks.h"

#include <algorithm>

#include "engine/base/check.h"

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

void SequenceBlocks::ReleaseOldSwaBlocks(int64_t first_query_position) {
  // The earliest query that can still run is first_query_position - rollback_slack (after a
  // rollback); it sees positions >= that - W + 1.
  const int64_t oldest_visible =
      first_query_position - geometry_.rollback_slack - geometry_.sliding_window + 1;
  if (oldest_visible <= 0) return;
  const int64_t releasable = oldest_visible / geometry_.block_size;  // blocks wholly before it
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
  for (BlockId block : full_table_) full_pool_->Release(block);
  for (BlockId block : swa_table_) {
    if (block != kNoBlock) swa_pool_->Release(block);
  }
  full_table_.clear();
  swa_table_.clear();
  swa_released_ = 0;
  length_ = 0;
}

}  // namespace stepserve::kv
