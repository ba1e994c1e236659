#include "engine/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/engine/scheduler/scheduler_table.h"

namespace stepserve::scheduler {
namespace {

TEST(SchedulerTest, ChunkedPrefillThenDecodeWhileAnotherPromptJoins) {
  auto add = [](Request r) { return [r](Scheduler& s) { ASSERT_TRUE(s.Add(r).ok()); }; };
  RunTable(Config(8, 16),
           {
               {add(Req(1, 20, 3)), 0, "1:0+8", "", 1, 0, 14},
               {nullptr, 1, "1:8+8", "", 1, 0, 12},
               {nullptr, 2, "1:16+4*", "", 1, 0, 11},  // prompt done: samples token 21
               // decode goes first; the new prompt takes the rest of the budget.
               {add(Req(2, 10)), 3, "1:20+1* 2:0+7", "", 2, 0, 8},
               // 1 reaches max_new_tokens = 3 and frees its 6 blocks.
               {nullptr, 4, "1:21+1* 2:7+3*", "1:finished", 1, 0, 13},
           });
}

TEST(SchedulerTest, PreemptsNewestWhenBlocksRunOutAndRecomputesIt) {
  auto add = [](Request r) { return [r](Scheduler& s) { ASSERT_TRUE(s.Add(r).ok()); }; };
  // 6 blocks of 4 tokens. A: 8-token prompt (2 blocks), B: 12 (3 blocks) -> 1 block free.
  RunTable(Config(32, 6),
           {
               {[&](Scheduler& s) {
                  add(Req(1, 8, /*max_new=*/4))(s);
                  add(Req(2, 12, /*max_new=*/4))(s);
                },
                0, "1:0+8* 2:0+12*", "", 2, 0, 1},
               // A needs a 3rd block at position 8 and takes the free one. B needs a 4th at 12:
               // B is the newest, so B is preempted (3 blocks freed) and re-queued in front; it
               // cannot be re-admitted yet (13 tokens need 4 blocks, 3 are free).
               {nullptr, 1, "1:8+1*", "2:preempted", 1, 1, 3},
               {nullptr, 2, "1:9+1*", "", 1, 1, 3},
               // A reaches its 4 tokens and frees its blocks.
               {nullptr, 3, "1:10+1*", "1:finished", 0, 1, 6},
               // B is recomputed: prompt + the token it had generated.
               {nullptr, 4, "2:0+13*", "", 1, 0, 2},
           });
}

TEST(SchedulerTest, CancelAndDeadlineFreeKvAtOnce) {
  Scheduler scheduler(Config(16, 16));
  ASSERT_TRUE(scheduler.Add(Req(1, 10)).ok());
  ASSERT_TRUE(scheduler.Add(Req(2, 4, 100, 0, /*deadline=*/5.0)).ok());
  ASSERT_TRUE(scheduler.Add(Req(3, 30, 100, 0, /*deadline=*/1.0)).ok());
  std::vector<Event> events;
  StepPlan plan = scheduler.Schedule(0, &events);
  EXPECT_EQ(Describe(plan), "1:0+10* 2:0+4* 3:0+2");  // 3 is still mostly queued work
  scheduler.Commit(plan, SampleAll(plan), &events);
  EXPECT_EQ(scheduler.full_pool().num_free(), 16 - 3 - 1 - 1);
  EXPECT_TRUE(scheduler.Cancel(1));
  EXPECT_FALSE(scheduler.Cancel(1));
  EXPECT_EQ(scheduler.full_pool().num_free(), 16 - 1 - 1);
  plan = scheduler.Schedule(2.0, &events);  // 3's deadline passed while running
  EXPECT_EQ(DescribeEvents(events), "3:deadline");
  EXPECT_EQ(Describe(plan), "2:4+1*");
  scheduler.Commit(plan, SampleAll(plan), &events);
  EXPECT_EQ(scheduler.full_pool().num_free(), 16 - 2);
}

TEST(SchedulerTest, DeadlineWhileQueued) {
  Scheduler scheduler(Config(4, 16, /*max_running=*/1));
  ASSERT_TRUE(scheduler.Add(Req(1, 4)).ok());
  ASSERT_TRUE(scheduler.Add(Req(2, 4, 100, 0, /*deadline=*/1.0)).ok());
  std::vector<Event> events;
  StepPlan plan = scheduler.Schedule(0, &events);
  EXPECT_EQ(Describe(plan), "1:0+4*");
  EXPECT_EQ(scheduler.num_waiting(), 1);
  EXPECT_EQ(scheduler.waiting_prompt_tokens(), 4);
  scheduler.Commit(plan, SampleAll(plan), &events);
  plan = scheduler.Schedule(1.5, &events);
  EXPECT_EQ(DescribeEvents(events), "2:deadline");
  EXPECT_EQ(scheduler.num_waiting(), 0);
}

TEST(SchedulerTest, DraftsVerifiedAndRejectedOnesRolledBack) {
  Scheduler scheduler(Config(16, 16));
  ASSERT_TRUE(scheduler.Add(Req(1, 6)).ok());
  std::vector<Event> events;
  StepPlan plan = scheduler.Schedule(0, &events);
  scheduler.Commit(plan, SampleAll(plan), &events);  // tokens: 6 prompt + 1
  scheduler.SetDrafts(1, {50, 51, 52});              // capped at the slack of 2
  plan = scheduler.Schedule(1, &events);
  ASSERT_EQ(Describe(plan), "1:6+3*");
  EXPECT_EQ(plan.seqs[0].num_drafts, 2);
  EXPECT_EQ(plan.seqs[0].tokens, (std::vector<int32_t>{7, 50, 51}));
  // Accept one draft: new tokens 50, 7; KV valid through position 7.
  scheduler.Commit(plan, SampleAll(plan, /*accept_drafts=*/1), &events);
  const std::vector<int32_t>& tokens = *scheduler.tokens(1);
  EXPECT_EQ(tokens.size(), 9u);
  EXPECT_EQ(tokens[7], 50);
  plan = scheduler.Schedule(2, &events);
  EXPECT_EQ(Describe(plan), "1:8+1*");
}

TEST(SchedulerTest, PriorityThenFifoAndBoundedQueue) {
  Scheduler scheduler(Config(4, 16, /*max_running=*/1));
  ASSERT_TRUE(scheduler.Add(Req(1, 4, 100, /*priority=*/1)).ok());
  ASSERT_TRUE(scheduler.Add(Req(2, 4, 100, /*priority=*/0)).ok());
  ASSERT_TRUE(scheduler.Add(Req(3, 4, 100, /*priority=*/1)).ok());
  ASSERT_TRUE(scheduler.Add(Req(4, 4, 100, /*priority=*/0)).ok());
  absl::Status full = scheduler.Add(Req(5, 4));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  std::vector<Event> events;
  EXPECT_EQ(Describe(scheduler.Schedule(0, &events)), "2:0+4*");
  EXPECT_TRUE(scheduler.Cancel(2));
  EXPECT_EQ(Describe(scheduler.Schedule(1, &events)), "4:0+4*");
  EXPECT_TRUE(scheduler.Cancel(4));
  EXPECT_EQ(Describe(scheduler.Schedule(2, &events)), "1:0+4*");
}

TEST(SchedulerTest, RejectsWhatCanNeverRun) {
  Scheduler scheduler(Config(8, 4));
  EXPECT_EQ(scheduler.Add(Req(1, 0)).code(), absl::StatusCode::kInvalidArgument);
  absl::Status too_long = scheduler.Add(Req(2, 65));
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("65 tokens"), std::string::npos);
  // 4 blocks x 4 tokens = 16 tokens of KV; 10 + 10 + slack 2 can never fit.
  EXPECT_EQ(scheduler.Add(Req(3, 10, 10)).code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(scheduler.Add(Req(4, 10, 4)).ok());
  EXPECT_EQ(scheduler.Add(Req(4, 3)).code(), absl::StatusCode::kInvalidArgument);  // duplicate
}

}  // namespace
}  // namespace stepserve::scheduler
