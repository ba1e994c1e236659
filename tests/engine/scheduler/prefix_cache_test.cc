// Table-driven scheduler tests of the prefix cache: block size 4, sliding window 8, slack 2 (as
// in scheduler_test.cc), cache on. Each row: plan ("(cN)": N positions taken from the cache at
// admission), events, running, waiting, free full blocks (cached ones count as free), and cached
// reusable blocks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/scheduler/scheduler.h"
#include "tests/engine/scheduler/scheduler_table.h"

namespace stepserve::scheduler {
namespace {

SchedulerConfig CachedConfig(int budget, int full_blocks) {
  SchedulerConfig config = Config(budget, full_blocks);
  config.kv.prefix_cache = true;
  return config;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Request ReqTokens(SeqId id, std::vector<int32_t> prompt, int64_t max_new) {
  return Request{.id = id, .prompt = std::move(prompt), .max_new_tokens = max_new};
}

std::function<void(Scheduler&)> Add(Request r) {
  return [r](Scheduler& s) { ASSERT_TRUE(s.Add(r).ok()); };
}

TEST(PrefixCacheSchedulerTest, SamePromptHitsAllButTheBlockOfItsLastToken) {
  RunTable(CachedConfig(32, 16),
           {
               // 12 tokens = 3 full blocks, published once computed.
               {Add(Req(1, 12, 2)), 0, "1:0+12*", "", 1, 0, 13, 0},
               // Same prompt: blocks 0, 1 hit; block 2 holds the last prompt token, which must
               // run. 1 decodes into a 4th block; 2 takes one private block (shared ones count
               // once), then 1 finishes: its block 2 parks in the cache.
               {Add(Req(2, 12, 2)), 1, "1:12+1* 2:8+4*(c8)", "1:finished", 1, 0, 13, 1},
               // 2 finishes too: its shared blocks 0, 1 park as well.
               {nullptr, 2, "2:12+1*", "2:finished", 0, 0, 16, 3},
               // A third time: the same 8-token hit, taken out of the cache.
               {Add(Req(3, 12, 1)), 3, "3:8+4*(c8)", "3:finished", 0, 0, 16, 3},
               // Prompts of 3 and 4 tokens: no block ends before their last token.
               {[](Scheduler& s) {
                  Add(Req(4, 3, 1))(s);
                  Add(Req(5, 4, 1))(s);
                },
                4, "4:0+3* 5:0+4*", "4:finished 5:finished", 0, 0, 16, 3},
           });
}

TEST(PrefixCacheSchedulerTest, PartialPrefixHitsUpToTheFirstDifferentBlock) {
  const std::vector<int32_t> system = Prompt(6);
  RunTable(CachedConfig(32, 16),
           {
               {Add(ReqTokens(1, Concat(system, Prompt(10, 500)), 1)), 0, "1:0+16*", "1:finished",
                0, 0, 16, 4},
               // Shares 6 tokens: one whole block. The second block differs at its 3rd token.
               {Add(ReqTokens(2, Concat(system, Prompt(6, 900)), 1)), 1, "2:4+8*(c4)", "2:finished",
                0, 0, 16, 6},
           });
}

TEST(PrefixCacheSchedulerTest, HitWhileTheFirstRequestStillRunsSharesItsBlocks) {
  Scheduler scheduler(CachedConfig(32, 16));
  RunTable(scheduler, {
                          {Add(Req(1, 12, 10)), 0, "1:0+12*", "", 1, 0, 13, 0},
                          {Add(Req(2, 12, 10)), 1, "1:12+1* 2:8+4*(c8)", "", 2, 0, 11, 0},
                      });
  // Blocks 0 and 1 are held by both.
  const kv::BlockPool& full = scheduler.full_pool();
  EXPECT_EQ(full.ref_count(0), 2);
  EXPECT_EQ(full.ref_count(1), 2);
  EXPECT_EQ(full.ref_count(2), 1);
  // Cancelling one keeps the other's blocks; cancelling both parks the published ones.
  EXPECT_TRUE(scheduler.Cancel(1));
  EXPECT_EQ(full.ref_count(0), 1);
  EXPECT_EQ(full.num_free(), 16 - 3);  // 2 holds 0, 1 (shared) and one private block
  EXPECT_EQ(full.num_cached(), 1);     // 1's published block 2
  EXPECT_TRUE(scheduler.Cancel(2));
  EXPECT_EQ(full.num_free(), 16);
  // 2's private copy of block 2 was never published (1's copy holds the key), and neither
  // sequence's 4th block was full.
  EXPECT_EQ(full.num_cached(), 3);
}

TEST(PrefixCacheSchedulerTest, EvictionUnderPressureTakesTheOldestCachedBlocksFirst) {
  const std::vector<int32_t> a = Prompt(8, 100), b = Prompt(8, 200);
  RunTable(
      CachedConfig(32, 8),
      {
          {Add(ReqTokens(1, a, 1)), 0, "1:0+8*", "1:finished", 0, 0, 8, 2},
          {Add(ReqTokens(2, b, 1)), 1, "2:0+8*", "2:finished", 0, 0, 8, 4},
          // 20 tokens need 5 blocks: the 4 never-used ones, then the oldest cached one:
          // a's second block (a sequence parks its tail first).
          {Add(ReqTokens(3, Prompt(20, 300), 1)), 2, "3:0+20*", "3:finished", 0, 0, 8, 8},
          // a's first block is still cached: a 4-token hit. The 2 new blocks evict b's
          // blocks (the oldest), not 3's.
          {Add(ReqTokens(4, Concat(a, Prompt(4, 400)), 1)), 3, "4:4+8*(c4)", "4:finished", 0, 0, 8,
           8},
          // b is gone: no hit. Its 3 blocks evict the oldest cached: 3's last three.
          {Add(ReqTokens(5, Concat(b, Prompt(1, 400)), 1)), 4, "5:0+9*", "5:finished", 0, 0, 8, 8},
          // 3's first two blocks are still there.
          {Add(ReqTokens(6, Prompt(20, 300), 1)), 5, "6:8+12*(c8)", "6:finished", 0, 0, 8, 8},
      });
}

TEST(PrefixCacheSchedulerTest, PreemptedSequenceHoldingSharedBlocksRecomputesFromTheCache) {
  // 5 blocks. 1 runs an 8-token prompt; 2 shares it (+4 tokens) and is preempted when 1 grows.
  const std::vector<int32_t> a = Prompt(8);
  RunTable(
      CachedConfig(32, 5),
      {
          {Add(ReqTokens(1, a, 8)), 0, "1:0+8*", "", 1, 0, 3, 0},
          {Add(ReqTokens(2, Concat(a, Prompt(4, 500)), 5)), 1, "1:8+1* 2:8+4*(c8)", "", 2, 0, 1, 0},
          {nullptr, 2, "1:9+1* 2:12+1*", "", 2, 0, 0, 0},
          {nullptr, 3, "1:10+1* 2:13+1*", "", 2, 0, 0, 0},
          {nullptr, 4, "1:11+1* 2:14+1*", "", 2, 0, 0, 0},
          // 1 needs a 4th block: 2 (newest) is preempted; its private block 2 (published)
          // parks in the cache, block 3 is freed, the shared 0, 1 stay with 1. 2 cannot
          // come back yet: its 12-token hit leaves 1 block to allocate, and none is free
          // once its own cached block is taken back.
          {nullptr, 5, "1:12+1*", "2:preempted", 1, 1, 1, 1},
          {nullptr, 6, "1:13+1*", "", 1, 1, 1, 1},
          // 1 reaches 8 tokens; its 3 full blocks park in the cache.
          {nullptr, 7, "1:14+1*", "1:finished", 0, 1, 5, 4},
          // 2 recomputes from the cache: prompt + 4 generated = 16 tokens, 12 cached (two
          // blocks 1 computed, one 2 computed before its preemption).
          {nullptr, 8, "2:12+4*(c12)", "2:finished", 0, 0, 5, 5},
      });
}

TEST(PrefixCacheSchedulerTest, CancellationReturnsBlocksToTheCache) {
  RunTable(CachedConfig(32, 16),
           {
               {Add(Req(1, 12, 10)), 0, "1:0+12*", "", 1, 0, 13, 0},
               // Cancelled while running: its 3 published blocks stay findable.
               {[](Scheduler& s) {
                  ASSERT_TRUE(s.Cancel(1));
                  Add(Req(2, 16, 1))(s);
                },
                1, "2:12+4*(c12)", "2:finished", 0, 0, 16, 4},
           });
}

TEST(PrefixCacheSchedulerTest, AdmissionCountsCachedBlocksAsFree) {
  // 4 blocks = 16 tokens; 3 end up cached, yet a request needing all 4 is admitted (it evicts
  // them) and "could never fit" stays about capacity.
  Scheduler scheduler(CachedConfig(32, 4));
  RunTable(scheduler, {{Add(Req(1, 12, 1)), 0, "1:0+12*", "1:finished", 0, 0, 4, 3}});
  EXPECT_EQ(scheduler.Add(Req(2, 20, 1)).code(), absl::StatusCode::kResourceExhausted);
  RunTable(scheduler,
           {{Add(ReqTokens(3, Prompt(13, 700), 1)), 1, "3:0+13*", "3:finished", 0, 0, 4, 3}});
}

TEST(PrefixCacheSchedulerTest, RejectedDraftsRollBackOnlyPrivateBlocks) {
  // Speculative rollback on a sequence that started from shared blocks: the drafts land in
  // private blocks past the hit, and rejecting them never touches a published block.
  Scheduler scheduler(CachedConfig(32, 16));
  RunTable(scheduler, {
                          {Add(Req(1, 9, 1)), 0, "1:0+9*", "1:finished", 0, 0, 16, 2},
                          {Add(Req(2, 9, 10)), 1, "2:8+1*(c8)", "", 1, 0, 13, 0},
                      });
  scheduler.SetDrafts(2, {50, 51});
  std::vector<Event> events;
  StepPlan plan = scheduler.Schedule(2, &events);
  ASSERT_EQ(Describe(plan), "2:9+3*");
  scheduler.Commit(plan, SampleAll(plan, /*accept_drafts=*/0), &events);  // both rejected
  EXPECT_EQ(scheduler.tokens(2)->size(), 11u);
  plan = scheduler.Schedule(3, &events);
  EXPECT_EQ(Describe(plan), "2:10+1*");
  scheduler.Commit(plan, SampleAll(plan), &events);
  EXPECT_TRUE(scheduler.Cancel(2));
  EXPECT_EQ(scheduler.full_pool().num_free(), 16);
}

}  // namespace
}  // namespace stepserve::scheduler
