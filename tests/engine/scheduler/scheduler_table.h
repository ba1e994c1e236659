// Helpers of the table-driven scheduler tests: requests, a compact text form of plans and
// events, and RunTable, which runs one Schedule + Commit per row and checks the expected running /
// waiting / free (and cached) block counts after it.
#ifndef STEPSERVE_TESTS_ENGINE_SCHEDULER_SCHEDULER_TABLE_H_
#define STEPSERVE_TESTS_ENGINE_SCHEDULER_SCHEDULER_TABLE_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "engine/scheduler/scheduler.h"

namespace stepserve::scheduler {

inline std::vector<int32_t> Prompt(int n, int32_t first = 100) {
  std::vector<int32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

inline Request Req(SeqId id, int prompt, int64_t max_new = 100, int32_t priority = 0,
                   double deadline = std::numeric_limits<double>::infinity()) {
  return Request{.id = id,
                 .prompt = Prompt(prompt),
                 .max_new_tokens = max_new,
                 .priority = priority,
                 .deadline_s = deadline};
}

// "id:start+count" per planned sequence, with '*' when it samples and "(cN)" when admission took
// N positions from the prefix cache, e.g. "1:0+8 2:3+1* 3:8+4*(c8)".
inline std::string Describe(const StepPlan& plan) {
  std::string text;
  for (const PlannedSeq& p : plan.seqs) {
    if (!text.empty()) text += " ";
    text += std::to_string(p.id) + ":" + std::to_string(p.start_pos) + "+" +
            std::to_string(p.tokens.size()) + (p.sample ? "*" : "");
    if (p.cached_tokens > 0) text += "(c" + std::to_string(p.cached_tokens) + ")";
  }
  return text;
}

inline std::string DescribeEvents(const std::vector<Event>& events) {
  static const char* kNames[] = {"preempted", "cancelled", "deadline", "finished"};
  std::string text;
  for (const Event& e : events) {
    if (!text.empty()) text += " ";
    text += std::to_string(e.id) + ":" + kNames[static_cast<int>(e.kind)];
  }
  return text;
}

// Commits a plan: every sampling sequence gets token 7 (plus all its drafts accepted when
// `accept_drafts`), nobody finishes by stop condition.
inline std::vector<SeqResult> SampleAll(const StepPlan& plan, int accept_drafts = 0) {
  std::vector<SeqResult> results;
  for (const PlannedSeq& p : plan.seqs) {
    if (!p.sample) continue;
    SeqResult r{.id = p.id};
    for (int i = 0; i < std::min(accept_drafts, p.num_drafts); ++i) {
      r.new_tokens.push_back(p.tokens[1 + i]);
    }
    r.new_tokens.push_back(7);
    results.push_back(r);
  }
  return results;
}

struct StepCase {
  std::function<void(Scheduler&)> before;  // adds, cancels, drafts
  double now;
  std::string plan;
  std::string events;  // from Schedule and Commit together
  int running, waiting, full_free;
  int accept_drafts = 0;
  int cached = -1;  // reusable cached blocks of the full pool (free_full counts them); -1: skip
};

// Runs the rows on `scheduler` (tests that inspect it between tables pass their own).
inline void RunTable(Scheduler& scheduler, const std::vector<StepCase>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "step " << i);
    const StepCase& step = steps[i];
    if (step.before) step.before(scheduler);
    std::vector<Event> events;
    StepPlan plan = scheduler.Schedule(step.now, &events);
    EXPECT_EQ(Describe(plan), step.plan);
    scheduler.Commit(plan, SampleAll(plan, step.accept_drafts), &events);
    EXPECT_EQ(DescribeEvents(events), step.events);
    EXPECT_EQ(scheduler.num_running(), step.running);
    EXPECT_EQ(scheduler.num_waiting(), step.waiting);
    EXPECT_EQ(scheduler.full_pool().num_free(), step.full_free);
    if (step.cached >= 0) EXPECT_EQ(scheduler.full_pool().num_cached(), step.cached);
  }
}

inline void RunTable(const SchedulerConfig& config, const std::vector<StepCase>& steps) {
  Scheduler scheduler(config);
  RunTable(scheduler, steps);
}

inline SchedulerConfig Config(int budget, int full_blocks, int max_running = 8) {
  return SchedulerConfig{.max_running = max_running,
                         .max_step_tokens = budget,
                         .max_queue = 4,
                         .max_context = 32,
                         .kv = {.block_size = 4, .sliding_window = 8, .rollback_slack = 2},
                         .full_blocks = full_blocks,
                         .swa_blocks = full_blocks};
}

}  // namespace stepserve::scheduler

#endif  // STEPSERVE_TESTS_ENGINE_SCHEDULER_SCHEDULER_TABLE_H_
