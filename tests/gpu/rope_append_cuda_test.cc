// The fused q/k norm + RoPE + KV append (kernels/attention/kv_append_rope_cuda.h) against the two
// kernels it replaces, QkNormRopeCuda then KvAppendCuda (each checked against the CPU in
// pointwise_cuda_test / attention_cuda_test): q and k bit for bit, the F32, F16 and Q8_0 caches
// byte for byte, on fresh random data, pages poisoned first, with a skipped row (slot -1), odd
// head counts and partial rotation. Plus the host-side checks (shapes that do not line up,
// no tokens).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/kv_append_rope_cuda.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/common/cuda_check.h"
#include "kernels/rope/rope_cuda.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/gpu/rope_append_case.h"

namespace stepserve::kernels {
namespace {

using testing::DeviceBuffer;
using testing::kRopeAppendCases;
using testing::MakeRopeAppendInputs;
using testing::RopeAppendArgs;
using testing::RopeAppendCase;
using testing::RopeAppendInputs;
using testing::RopeAppendPointers;

std::vector<uint8_t> Download(const void* ptr, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

template <class T>
void Upload(DeviceBuffer& dst, const std::vector<T>& src) {
  ASSERT_TRUE(dst.ptr != nullptr);
  ASSERT_EQ(cudaMemcpy(dst.ptr, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
}

// One run's device copies of the inputs (q and k are rewritten in place), the pages poisoned.
struct Run {
  DeviceBuffer q, k, v, k_cache, v_cache;
  Run(const RopeAppendInputs& in, size_t cache_bytes)
      : q(in.q.size() * 4),
        k(in.k.size() * 4),
        v(in.v.size() * 4),
        k_cache(cache_bytes),
        v_cache(cache_bytes) {}
};

void CheckCase(const RopeAppendCase& c, KvDtype dtype) {
  SCOPED_TRACE("heads " + std::to_string(c.q_heads) + "/" + std::to_string(c.k_heads) + " dh " +
               std::to_string(c.head_dim) + " n_rot " + std::to_string(c.n_rot) + " tokens " +
               std::to_string(c.tokens) + " dtype " + std::to_string(static_cast<int>(dtype)));
  std::random_device rd;
  const uint32_t seed = rd();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const RopeAppendInputs in = MakeRopeAppendInputs(c, seed);
  const size_t cache_bytes = in.cache_bytes(dtype);
  ASSERT_GT(cache_bytes, 0u);
  DeviceBuffer q_norm(in.q_norm.size() * 4), k_norm(in.k_norm.size() * 4), freq(in.freq.size() * 4),
      positions(in.positions.size() * 4), slots(in.slots.size() * 8);
  ASSERT_NO_FATAL_FAILURE(Upload(q_norm, in.q_norm));
  ASSERT_NO_FATAL_FAILURE(Upload(k_norm, in.k_norm));
  ASSERT_NO_FATAL_FAILURE(Upload(freq, in.freq));
  ASSERT_NO_FATAL_FAILURE(Upload(positions, in.positions));
  ASSERT_NO_FATAL_FAILURE(Upload(slots, in.slots));
  auto prepare = [&](Run& r, QkNormRopeCudaArgs* rope, KvAppendArgs* append) {
    ASSERT_NO_FATAL_FAILURE(Upload(r.q, in.q));
    ASSERT_NO_FATAL_FAILURE(Upload(r.k, in.k));
    ASSERT_NO_FATAL_FAILURE(Upload(r.v, in.v));
    ASSERT_TRUE(r.k_cache.ptr && r.v_cache.ptr);
    ASSERT_EQ(cudaMemset(r.k_cache.ptr, 0xA5, cache_bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(r.v_cache.ptr, 0xA5, cache_bytes), cudaSuccess);
    RopeAppendArgs(in, dtype,
                   RopeAppendPointers{.q = static_cast<float*>(r.q.ptr),
                                      .k = static_cast<float*>(r.k.ptr),
                                      .v = static_cast<const float*>(r.v.ptr),
                                      .k_cache = r.k_cache.ptr,
                                      .v_cache = r.v_cache.ptr,
                                      .q_norm = static_cast<const float*>(q_norm.ptr),
                                      .k_norm = static_cast<const float*>(k_norm.ptr),
                                      .freq = static_cast<const float*>(freq.ptr),
                                      .positions = static_cast<const int32_t*>(positions.ptr),
                                      .slots = static_cast<const int64_t*>(slots.ptr)},
                   rope, append);
  };
  Run two(in, cache_bytes), fused(in, cache_bytes);
  QkNormRopeCudaArgs rope_two, rope_fused;
  KvAppendArgs append_two, append_fused;
  ASSERT_NO_FATAL_FAILURE(prepare(two, &rope_two, &append_two));
  ASSERT_NO_FATAL_FAILURE(prepare(fused, &rope_fused, &append_fused));
  ASSERT_TRUE(QkNormRopeAppendCudaApplies(rope_fused, append_fused));
  ASSERT_EQ(QkNormRopeCuda(rope_two, nullptr), KernelStatus::kOk);
  ASSERT_EQ(KvAppendCuda(append_two, nullptr), KernelStatus::kOk);
  ASSERT_EQ(QkNormRopeAppendCuda(rope_fused, append_fused, nullptr), KernelStatus::kOk);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const size_t q_bytes = in.q.size() * 4, kv_bytes = in.k.size() * 4;
  EXPECT_EQ(Download(two.q.ptr, q_bytes), Download(fused.q.ptr, q_bytes)) << "q";
  EXPECT_EQ(Download(two.k.ptr, kv_bytes), Download(fused.k.ptr, kv_bytes)) << "k";
  const std::vector<uint8_t> k_two = Download(two.k_cache.ptr, cache_bytes);
  const std::vector<uint8_t> v_two = Download(two.v_cache.ptr, cache_bytes);
  EXPECT_EQ(k_two, Download(fused.k_cache.ptr, cache_bytes)) << "K cache";
  EXPECT_EQ(v_two, Download(fused.v_cache.ptr, cache_bytes)) << "V cache";
  // Not a comparison of two untouched caches: every cached row changed, the rest did not.
  const int64_t row_bytes = in.cache_row_bytes(dtype);
  for (int64_t s = 0; s < in.total_slots(); ++s) {
    const bool written = std::find(in.slots.begin(), in.slots.end(), s) != in.slots.end();
    const bool poisoned =
        std::all_of(v_two.begin() + s * row_bytes, v_two.begin() + (s + 1) * row_bytes,
                    [](uint8_t b) { return b == 0xA5; });
    EXPECT_EQ(poisoned, !written) << "slot " << s;
  }
}

TEST(QkNormRopeAppendCudaTest, EqualsTheTwoKernelsBitForBit) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  for (const RopeAppendCase& c : kRopeAppendCases) {
    for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
      CheckCase(c, dtype);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(QkNormRopeAppendCudaTest, RejectsShapesThatDoNotLineUp) {
  std::vector<float> host(64);
  int64_t slot = 0;
  int32_t position = 0;
  QkNormRopeCudaArgs rope;
  rope.q = host.data();
  rope.q_stride = 32;
  rope.q_heads = 2;
  rope.q_norm = host.data();
  rope.k = host.data();
  rope.k_stride = 32;
  rope.k_heads = 2;
  rope.k_norm = host.data();
  rope.tokens = 1;
  rope.head_dim = 16;
  rope.positions = &position;
  rope.n_rot = 16;
  KvAppendArgs append;
  append.k = host.data();
  append.k_stride = 32;
  append.v = host.data();
  append.v_stride = 32;
  append.tokens = 1;
  append.slots = &slot;
  append.kv = PagedKv{.k = host.data(),
                      .v = host.data(),
                      .dtype = KvDtype::kF32,
                      .num_blocks = 1,
                      .block_size = 1,
                      .kv_heads = 2,
                      .head_dim = 16};
  EXPECT_TRUE(QkNormRopeAppendCudaApplies(rope, append));
  KvAppendArgs other = append;
  other.kv.kv_heads = 1;  // the cache's heads are not rope's k heads
  other.k_stride = 32;
  EXPECT_FALSE(QkNormRopeAppendCudaApplies(rope, other));
  EXPECT_EQ(QkNormRopeAppendCuda(rope, other, nullptr), KernelStatus::kUnsupportedType);
  other = append;
  other.k = host.data() + 1;  // appends another k than the one rope rotates
  EXPECT_FALSE(QkNormRopeAppendCudaApplies(rope, other));
  other = append;
  other.tokens = 2;
  EXPECT_FALSE(QkNormRopeAppendCudaApplies(rope, other));
  QkNormRopeCudaArgs no_k = rope;
  no_k.k = nullptr;
  no_k.k_heads = 0;
  EXPECT_FALSE(QkNormRopeAppendCudaApplies(no_k, append));
  // Bad arguments of either half are reported as that half reports them, with nothing launched.
  QkNormRopeCudaArgs bad_rope = rope;
  bad_rope.n_rot = 3;
  EXPECT_EQ(QkNormRopeAppendCuda(bad_rope, append, nullptr), KernelStatus::kInvalidArgument);
  KvAppendArgs bad_append = append;
  bad_append.v_stride = 8;
  EXPECT_EQ(QkNormRopeAppendCuda(rope, bad_append, nullptr), KernelStatus::kInvalidArgument);
  // No tokens: nothing to do.
  QkNormRopeCudaArgs none = rope;
  none.tokens = 0;
  KvAppendArgs none_append = append;
  none_append.tokens = 0;
  EXPECT_EQ(QkNormRopeAppendCuda(none, none_append, nullptr), KernelStatus::kOk);
}

}  // namespace
}  // namespace stepserve::kernels
