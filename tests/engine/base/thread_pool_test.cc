// ThreadPool::ParallelFor: every index of every job run exactly once, with ranges inside the job,
// across many back-to-back jobs on more threads than cores. Workers then wake late: one that
// registers for a job just finished may claim chunks of the next, which must count it (written
// while looking for the CUDA tests' rare CPU-side mismatch, docs/cuda-engine.md, session 17; the
// pool passed).
#include "engine/base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace stepserve {
namespace {

TEST(ThreadPoolTest, BackToBackJobsCoverEveryIndexOnce) {
  for (int threads : {2, 5, 16}) {
    ThreadPool pool(threads);
    constexpr int kJobs = 4000;
    for (int job = 0; job < kJobs; ++job) {
      const int64_t n = 1 + (job * 7919) % 157;
      const int64_t min_chunk = 1 + job % 4;
      auto hits = std::make_unique<std::atomic<int>[]>(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) hits[i].store(0, std::memory_order_relaxed);
      std::atomic<int> foreign{0};
      pool.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
        if (begin < 0 || end > n || begin >= end) {
          foreign.fetch_add(1, std::memory_order_relaxed);
          return;
        }
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
      });
      ASSERT_EQ(foreign.load(), 0) << threads << " threads, job " << job << ": a bad range";
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i].load(), 1) << threads << " threads, job " << job << " (n " << n
                                     << ", min chunk " << min_chunk << "): index " << i;
      }
    }
  }
}

TEST(ThreadPoolTest, NestedAndSmallCallsRunInline) {
  ThreadPool pool(4);
  std::vector<int> out(64, 0);
  pool.ParallelFor(8, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      pool.ParallelFor(8, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) out[r * 8 + c] += 1;
      });
    }
  });
  for (int v : out) EXPECT_EQ(v, 1);
  int calls = 0;
  pool.ParallelFor(3, 8, [&](int64_t begin, int64_t end) {
    ++calls;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 3);
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace stepserve
