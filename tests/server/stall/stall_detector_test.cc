// StallDetector: stalled only while busy with an unchanged step count for the whole timeout;
// progress or idleness resets the clock.
#include "server/stall_detector.h"

#include "gtest/gtest.h"

namespace stepserve::server {
namespace {

using std::chrono::seconds;

TEST(StallDetectorTest, BusyWithoutProgressForTheTimeoutIsStalled) {
  StallDetector stall(seconds(60));
  const StallDetector::Clock::time_point t0{};
  EXPECT_FALSE(stall.Update(t0, true, 5));
  EXPECT_FALSE(stall.Update(t0 + seconds(59), true, 5));
  EXPECT_TRUE(stall.Update(t0 + seconds(60), true, 5));
  EXPECT_TRUE(stall.Update(t0 + seconds(90), true, 5));
  EXPECT_EQ(stall.stalled_for(t0 + seconds(90)), seconds(90));
  // One step of progress: live again, and the clock restarts.
  EXPECT_FALSE(stall.Update(t0 + seconds(91), true, 6));
  EXPECT_FALSE(stall.Update(t0 + seconds(150), true, 6));
  EXPECT_TRUE(stall.Update(t0 + seconds(151), true, 6));
}

TEST(StallDetectorTest, IdleEngineIsNeverStalled) {
  StallDetector stall(seconds(10));
  const StallDetector::Clock::time_point t0{};
  for (int s = 0; s <= 100; s += 5) EXPECT_FALSE(stall.Update(t0 + seconds(s), false, 3));
  // Work arrives after a long idle period: the timeout counts from then, not from the last step.
  EXPECT_FALSE(stall.Update(t0 + seconds(101), true, 3));
  EXPECT_FALSE(stall.Update(t0 + seconds(110), true, 3));
  EXPECT_TRUE(stall.Update(t0 + seconds(111), true, 3));
}

TEST(StallDetectorTest, SteadyProgressIsNeverStalled) {
  StallDetector stall(seconds(1));
  const StallDetector::Clock::time_point t0{};
  for (int s = 0; s < 1000; ++s) EXPECT_FALSE(stall.Update(t0 + seconds(s), true, s));
}

}  // namespace
}  // namespace stepserve::server
