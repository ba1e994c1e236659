// BearerAuth: trimming, accept / refuse, rotation by rewriting the file, constant-time compare.
#include "server/auth.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"

namespace stepserve::server {
namespace {

TEST(AuthTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(AuthTest, ChecksTrimmedTokenAndPicksUpRotation) {
  const std::string path = ::testing::TempDir() + "/auth_token_" + std::to_string(getpid());
  std::ofstream(path) << "\n  tok-1 \n";
  auto auth = BearerAuth::Create(path);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->Check("Bearer tok-1").ok());
  EXPECT_EQ((*auth)->Check("").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*auth)->Check("Bearer tok-2").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*auth)->Check("tok-1").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*auth)->Check("Bearer tok-1x").code(), absl::StatusCode::kUnauthenticated);

  // Rotation: the file is re-read at most once a second.
  std::ofstream(path) << "tok-2-longer";
  bool rotated = false;
  for (int i = 0; i < 30 && !rotated; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rotated = (*auth)->Check("Bearer tok-2-longer").ok();
  }
  EXPECT_TRUE(rotated);
  EXPECT_EQ((*auth)->Check("Bearer tok-1").code(), absl::StatusCode::kUnauthenticated);
  unlink(path.c_str());
}

TEST(AuthTest, MissingOrEmptyFileIsAnErrorNamingTheFlag) {
  auto missing = BearerAuth::Create("/nonexistent/token");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--auth-token-file"), std::string::npos);
  const std::string path = ::testing::TempDir() + "/auth_empty_" + std::to_string(getpid());
  std::ofstream(path) << "  \n";
  auto empty = BearerAuth::Create(path);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
  unlink(path.c_str());
}

}  // namespace
}  // namespace stepserve::server
