#include "engine/kv/sequence_blocks.h"

#include <gtest/gtest.h>

namespace stepserve::kv {
namespace {

TEST(BlockPoolTest, AllocatesRetainsAndReleases) {
  BlockPool pool(3);
  EXPECT_EQ(pool.num_free(), 3);
  BlockId a = *pool.Allocate();
  BlockId b = *pool.Allocate();
  BlockId c = *pool.Allocate();
  EXPECT_EQ(a, 0);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_FALSE(pool.Allocate().has_value());
  pool.Retain(b);
  pool.Release(b);
  EXPECT_EQ(pool.num_free(), 0);
  pool.Release(b);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(*pool.Allocate(), b);
}

TEST(BlockPoolDeathTest, DoubleReleaseIsAnInvariantViolation) {
  BlockPool pool(1);
  BlockId a = *pool.Allocate();
  pool.Release(a);
  EXPECT_DEATH(pool.Release(a), "release of a free block");
}

// Table-driven: after each Grow/Truncate, the expected table sizes, released sliding blocks and
// free counts of both pools.
struct Step {
  enum Op { kGrow, kTruncate } op;
  int64_t length;
  bool grow_ok;
  size_t full_blocks;
  size_t swa_slots;
  int swa_released;
  int full_free;
  int swa_free;
};

TEST(SequenceBlocksTest, SlidingWindowReleasesOldBlocksKeepingSlack) {
  // block 4, window 8, slack 2: a first query at q keeps positions >= q - 2 - 8 + 1.
  KvGeometry geometry{.block_size = 4, .sliding_window = 8, .rollback_slack = 2};
  BlockPool full(16), swa(16);
  SequenceBlocks seq(geometry, &full, &swa);
  const Step steps[] = {
      // prompt of 10: queries start at 0, nothing released.
      {Step::kGrow, 10, true, 3, 3, 0, 13, 13},
      // decode to 11: first query 10 -> oldest visible 1 -> no whole block before it.
      {Step::kGrow, 11, true, 3, 3, 0, 13, 13},
      // grow to 17: first query 11 -> oldest 2 -> still none; 5 blocks each.
      {Step::kGrow, 17, true, 5, 5, 0, 11, 11},
      // grow to 20: first query 17 -> oldest 8 -> blocks 0,1 released.
      {Step::kGrow, 20, true, 5, 5, 2, 11, 13},
      // rollback 2 (within slack) to 18: no block boundary crossed.
      {Step::kTruncate, 18, true, 5, 5, 2, 11, 13},
      // rollback to 16: the 5th block (positions 16..19) goes in both tables.
      {Step::kTruncate, 16, true, 4, 4, 2, 12, 14},
  };
  for (const Step& step : steps) {
    SCOPED_TRACE(testing::Message() << "length " << step.length);
    if (step.op == Step::kGrow) {
      EXPECT_EQ(seq.Grow(step.length), step.grow_ok);
    } else {
      seq.Truncate(step.length);
    }
    EXPECT_EQ(seq.length(), step.length);
    EXPECT_EQ(seq.full_table().size(), step.full_blocks);
    EXPECT_EQ(seq.swa_table().size(), step.swa_slots);
    int released = 0;
    for (BlockId id : seq.swa_table()) released += id == kNoBlock;
    EXPECT_EQ(released, step.swa_released);
    EXPECT_EQ(full.num_free(), step.full_free);
    EXPECT_EQ(swa.num_free(), step.swa_free);
  }
  seq.Clear();
  EXPECT_EQ(full.num_free(), 16);
  EXPECT_EQ(swa.num_free(), 16);
}

TEST(SequenceBlocksTest, GrowIsAllOrNothingWhenAPoolRunsOut) {
  KvGeometry geometry{.block_size = 4, .sliding_window = 8};
  BlockPool full(2), swa(8);
  SequenceBlocks seq(geometry, &full, &swa);
  ASSERT_TRUE(seq.Grow(8));
  EXPECT_EQ(seq.full_blocks_needed(9), 1);
  EXPECT_FALSE(seq.Grow(9));
  EXPECT_EQ(seq.length(), 8);
  EXPECT_EQ(swa.num_free(), 6);  // nothing taken from the sliding pool either
}

TEST(SequenceBlocksTest, DestructorReturnsBlocks) {
  KvGeometry geometry{.block_size = 16, .sliding_window = 32};
  BlockPool full(8), swa(8);
  {
    SequenceBlocks seq(geometry, &full, &swa);
    ASSERT_TRUE(seq.Grow(100));
    EXPECT_EQ(full.num_free(), 1);
  }
  EXPECT_EQ(full.num_free(), 8);
  EXPECT_EQ(swa.num_free(), 8);
}

TEST(SequenceBlocksDeathTest, RollbackPastSlackIsAnInvariantViolation) {
  KvGeometry geometry{.block_size = 4, .sliding_window = 4, .rollback_slack = 0};
  BlockPool full(16), swa(16);
  SequenceBlocks seq(geometry, &full, &swa);
  ASSERT_TRUE(seq.Grow(12));
  ASSERT_TRUE(seq.Grow(13));  // first query 12 -> oldest 9 -> blocks 0, 1 released
  EXPECT_DEATH(seq.Truncate(4), "rollback past the sliding-window slack");
}

}  // namespace
}  // namespace stepserve::kv
