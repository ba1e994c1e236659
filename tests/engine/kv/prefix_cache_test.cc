// Prefix cache in the KV bookkeeping: publication, lookup with exact content checks, the LRU of
// reusable blocks, and hits that both pools (full and sliding) can serve.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "engine/kv/block_hash.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/sequence_blocks.h"

namespace stepserve::kv {
namespace {

std::vector<int32_t> Tokens(int n, int32_t first = 100) {
  std::vector<int32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(BlockHashTest, DependsOnParentAndEveryToken) {
  const std::vector<int32_t> a = {1, 2, 3, 4};
  std::vector<int32_t> b = a;
  b[3] = 5;
  EXPECT_EQ(ChainBlockHash(kRootBlockHash, a), ChainBlockHash(kRootBlockHash, a));
  EXPECT_NE(ChainBlockHash(kRootBlockHash, a), ChainBlockHash(kRootBlockHash, b));
  EXPECT_NE(ChainBlockHash(kRootBlockHash, a), ChainBlockHash(kRootBlockHash + 1, a));
  EXPECT_NE(ChainBlockHash(kRootBlockHash, std::span(a).first(3)),
            ChainBlockHash(kRootBlockHash, a));
}

TEST(BlockPoolCacheTest, PublishedBlocksParkInLruAndAreEvictedOldestFirst) {
  BlockPool pool(3);
  const std::vector<int32_t> t0 = {1, 2}, t1 = {3, 4};
  BlockId a = *pool.Allocate(), b = *pool.Allocate(), c = *pool.Allocate();
  EXPECT_NE(pool.Publish(a, {10, 0, t0}), 0u);
  EXPECT_NE(pool.Publish(b, {11, 0, t1}), 0u);
  EXPECT_EQ(pool.Publish(c, {10, 0, t0}), 0u);  // key taken: c stays private
  pool.Release(b);                              // b released first: the oldest in the LRU
  pool.Release(a);
  pool.Release(c);
  EXPECT_EQ(pool.num_free(), 3);  // cached blocks count as free
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.Find({10, 0, t0}), a);
  // Plain free blocks go first, then the cache from its oldest end.
  EXPECT_EQ(*pool.Allocate(), c);
  EXPECT_EQ(*pool.Allocate(), b);
  EXPECT_FALSE(pool.Find({11, 0, t1}).has_value());  // evicted
  EXPECT_EQ(pool.Find({10, 0, t0}), a);
  pool.Retain(a);  // a hit takes a out of the LRU
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_FALSE(pool.Allocate().has_value());
}

TEST(BlockPoolCacheTest, FindComparesContentNotJustTheKey) {
  BlockPool pool(2);
  const std::vector<int32_t> tokens = {1, 2, 3}, other = {1, 2, 4};
  BlockId a = *pool.Allocate();
  const uint64_t serial = pool.Publish(a, {42, 7, tokens});
  ASSERT_NE(serial, 0u);
  EXPECT_EQ(pool.serial(a), serial);
  EXPECT_EQ(pool.Find({42, 7, tokens}), a);
  EXPECT_FALSE(pool.Find({42, 7, other}).has_value());   // same key, other tokens
  EXPECT_FALSE(pool.Find({42, 8, tokens}).has_value());  // same key, other parent
  EXPECT_FALSE(pool.Find({43, 7, tokens}).has_value());
}

TEST(BlockPoolCacheDeathTest, RetainOfAPlainFreeBlockIsAnInvariantViolation) {
  BlockPool pool(1);
  BlockId a = *pool.Allocate();
  pool.Release(a);
  EXPECT_DEATH(pool.Retain(a), "retain of a free block");
}

KvGeometry CachedGeometry(int32_t window = 0, int32_t slack = 0) {
  return KvGeometry{.block_size = 4,
                    .sliding_window = window,
                    .rollback_slack = slack,
                    .has_full_layers = true,
                    .prefix_cache = true};
}

TEST(SequenceBlocksCacheTest, SecondSequenceSharesTheFullBlocksOfTheFirst) {
  BlockPool full(16), swa(16);
  const std::vector<int32_t> tokens = Tokens(14);
  SequenceBlocks first(CachedGeometry(), &full, &swa);
  ASSERT_TRUE(first.Grow(14));
  first.PublishComputed(tokens, 14);  // blocks 0..2 are full; block 3 (12, 13) is not
  SequenceBlocks second(CachedGeometry(), &full, &swa);
  EXPECT_EQ(second.AttachCachedPrefix(tokens, 13), 12);
  EXPECT_EQ(second.length(), 12);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(second.full_table()[i], first.full_table()[i]);
    EXPECT_EQ(full.ref_count(first.full_table()[i]), 2);
  }
  // The hit is capped by max_length (rounded down to a block).
  SequenceBlocks third(CachedGeometry(), &full, &swa);
  EXPECT_EQ(third.AttachCachedPrefix(tokens, 11), 8);
  // A different second block ends the run after the first block.
  std::vector<int32_t> other = tokens;
  other[5] = 1;
  SequenceBlocks fourth(CachedGeometry(), &full, &swa);
  EXPECT_EQ(fourth.AttachCachedPrefix(other, 13), 4);
  // Appending goes to private blocks.
  ASSERT_TRUE(second.Grow(14));
  EXPECT_EQ(second.full_table().size(), 4u);
  EXPECT_NE(second.full_table()[3], first.full_table()[3]);
}

TEST(SequenceBlocksCacheTest, CacheOffNeverHits) {
  BlockPool full(8), swa(8);
  const std::vector<int32_t> tokens = Tokens(9);
  KvGeometry geometry = CachedGeometry();
  geometry.prefix_cache = false;
  SequenceBlocks first(geometry, &full, &swa);
  ASSERT_TRUE(first.Grow(9));
  first.PublishComputed(tokens, 9);
  first.Clear();
  EXPECT_EQ(full.num_cached(), 0);
  SequenceBlocks second(geometry, &full, &swa);
  EXPECT_EQ(second.AttachCachedPrefix(tokens, 8), 0);
}

TEST(SequenceBlocksCacheTest, SlidingBlocksOutsideTheWindowLimitTheHit) {
  // Window 8, block 4, no slack: a query at q needs sliding positions >= q - 7.
  BlockPool full(16), swa(16);
  const std::vector<int32_t> tokens = Tokens(30);
  SequenceBlocks first(CachedGeometry(/*window=*/8), &full, &swa);
  ASSERT_TRUE(first.Grow(24));
  first.PublishComputed(tokens, 24);  // 6 blocks published in both pools
  ASSERT_TRUE(first.Grow(25));        // first query 24 -> sliding blocks 0..3 released
  first.PublishComputed(tokens, 25);
  first.Clear();  // everything parks in the LRUs; the released sliding blocks did already
  EXPECT_EQ(full.num_cached(), 6);
  EXPECT_EQ(swa.num_cached(), 6);
  // Evict the oldest cached sliding blocks: blocks 0 and 1 went first (released at Grow(25)).
  std::vector<BlockId> taken;
  for (int i = 0; i < 10 + 2; ++i) taken.push_back(*swa.Allocate());
  EXPECT_EQ(swa.num_cached(), 4);
  // A 24-token hit needs sliding blocks 4, 5 (a query at 24 sees positions >= 17): held.
  SequenceBlocks second(CachedGeometry(8), &full, &swa);
  EXPECT_EQ(second.AttachCachedPrefix(tokens, 29), 24);
  EXPECT_EQ(second.swa_first_kept_position(), 16);
  EXPECT_EQ(second.swa_table()[3], kNoBlock);
  EXPECT_NE(second.swa_table()[4], kNoBlock);
  // With max 11 the hit could be 8 positions, which needs sliding blocks 0 and 1, or 4, which
  // needs block 0: both evicted, so no hit.
  SequenceBlocks third(CachedGeometry(8), &full, &swa);
  EXPECT_EQ(third.AttachCachedPrefix(tokens, 11), 0);
  for (BlockId b : taken) swa.Release(b);
}

TEST(SequenceBlocksCacheDeathTest, RollingBackIntoASharedBlockIsAnInvariantViolation) {
  BlockPool full(8), swa(8);
  const std::vector<int32_t> tokens = Tokens(9);
  SequenceBlocks first(CachedGeometry(), &full, &swa);
  ASSERT_TRUE(first.Grow(9));
  first.PublishComputed(tokens, 9);
  EXPECT_DEATH(first.Truncate(6), "write into a shared KV block");
}

}  // namespace
}  // namespace stepserve::kv
