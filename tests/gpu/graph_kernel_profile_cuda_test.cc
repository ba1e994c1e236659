// ProfileGraphKernels (engine/backend/cuda/graph_kernel_profile.h) on a captured graph of three
// kernel kinds of known, very different sizes: a 512 MiB copy (1 GiB read and written), a 64 MiB
// read and an 8 MiB copy on another grid. The sweep must find three kinds, put the big copy first
// with most of the step's time, leave every node enabled (a replay afterwards still copies), and
// its JSON must carry one step line and one line per kind. The JSON formatting alone (names with
// quotes) runs without a device.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "engine/backend/cuda/graph_kernel_profile.h"
#include "gtest/gtest.h"
#include "kernels/bandwidth/copy_cuda.h"
#include "kernels/common/cuda_check.h"
#include "tests/gpu/backend_test_util.h"

namespace stepserve {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(GraphKernelProfileJsonTest, OneStepLineThenOneLinePerKindWithNamesEscaped) {
  GraphKernelProfile profile;
  profile.rows = 4;
  profile.kernel_nodes = 3;
  profile.replays = 5;
  profile.full_us = 100;
  GraphKernelCost a;
  a.kernel = "void K<\"q\\x\">(int)";
  a.grid = dim3(8, 2, 1);
  a.block = dim3(128);
  a.nodes = 2;
  a.without_us = 40;
  a.marginal_us = 60;
  GraphKernelCost b = a;
  b.kernel = "void L(int)";
  b.nodes = 1;
  b.without_us = 90;
  b.marginal_us = 10;
  profile.kernels = {a, b};
  const std::vector<std::string> lines = Lines(GraphKernelProfileJson(profile));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("\"graph_profile\":\"step\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"sum_marginal_us\":70.00"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"kernel\":\"void K<\\\"q\\\\x\\\">(int)\""), std::string::npos)
      << lines[1];
  EXPECT_NE(lines[1].find("\"per_node_us\":30.000"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("\"grid\":\"8,2,1\""), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("\"kernel\":\"void L(int)\""), std::string::npos) << lines[2];
}

TEST(GraphKernelProfileCudaTest, FindsTheKindsAndTheirShareAndLeavesTheGraphWhole) {
  if (kernels::CudaDeviceCount() == 0) GTEST_SKIP() << gpu_testing::kNoDeviceMessage;
  constexpr int64_t kBig = int64_t{512} << 20, kRead = int64_t{64} << 20, kSmall = int64_t{8} << 20;
  void *src = nullptr, *dst = nullptr, *small = nullptr;
  uint32_t* sink = nullptr;
  ASSERT_EQ(cudaMalloc(&src, kBig), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dst, kBig), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&small, kSmall), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&sink), 16), cudaSuccess);
  ASSERT_EQ(cudaMemset(src, 0x5A, kBig), cudaSuccess);
  ASSERT_EQ(cudaMemset(dst, 0, kBig), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(kernels::CopyCuda(dst, src, kBig, 0, stream), kernels::KernelStatus::kOk);
  EXPECT_EQ(kernels::ReadCuda(src, kRead, sink, stream), kernels::KernelStatus::kOk);
  EXPECT_EQ(kernels::CopyCuda(small, src, kSmall, 7, stream), kernels::KernelStatus::kOk);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  absl::StatusOr<GraphKernelProfile> profile = ProfileGraphKernels(graph, exec, stream, 5);
  ASSERT_TRUE(profile.ok()) << profile.status();
  std::printf("%s", GraphKernelProfileJson(*profile).c_str());
  EXPECT_EQ(profile->kernel_nodes, 3);
  ASSERT_EQ(profile->kernels.size(), 3u);
  EXPECT_GT(profile->full_us, 0.0);
  // The 512 MiB copy (four blocks per multiprocessor, not 7) moves ~90% of the bytes.
  const GraphKernelCost& first = profile->kernels[0];
  EXPECT_NE(first.kernel.find("Copy"), std::string::npos) << first.kernel;
  EXPECT_NE(first.grid.x, 7u);
  EXPECT_GT(first.marginal_us, 0.6 * profile->full_us);
  EXPECT_LT(first.marginal_us, 1.1 * profile->full_us);
  EXPECT_GT(first.marginal_us, profile->kernels[1].marginal_us);
  EXPECT_GT(first.marginal_us, profile->kernels[2].marginal_us);
  for (const GraphKernelCost& cost : profile->kernels) EXPECT_EQ(cost.nodes, 1);

  // Every node enabled again: a replay copies the whole buffer.
  ASSERT_EQ(cudaMemsetAsync(dst, 0, kBig, stream), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<uint8_t> tail(4096);
  ASSERT_EQ(cudaMemcpy(tail.data(), static_cast<uint8_t*>(dst) + kBig - 4096, 4096,
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (const uint8_t v : tail) ASSERT_EQ(v, 0x5A);

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(src);
  cudaFree(dst);
  cudaFree(small);
  cudaFree(sink);
}

}  // namespace
}  // namespace stepserve
