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
#include "kernels/rope/rope_cuda.h"
#include "tests/gpu/cuda_test_util.h"

namespace stepserve::kernels {
namespace {

using testing::DeviceBuffer;

int CudaDevices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

struct Case {
  int64_t q_heads, k_heads, head_dim, n_rot, tokens;
  bool freq_factors;
};

std::vector<uint8_t> Download(const void* ptr, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// Device copies of the inputs for one run: q, k, v rows (padded strides), the caches poisoned.
struct Run {
  DeviceBuffer q, k, v, k_cache, v_cache;
  Run(size_t q_bytes, size_t kv_bytes, size_t cache_bytes)
      : q(q_bytes), k(kv_bytes), v(kv_bytes), k_cache(cache_bytes), v_cache(cache_bytes) {}
};

void CheckCase(const Case& c, KvDtype dtype) {
  const std::string what = "heads " + std::to_string(c.q_heads) + "/" + std::to_string(c.k_heads) +
                           " dh " + std::to_string(c.head_dim) + " n_rot " +
                           std::to_string(c.n_rot) + " tokens " + std::to_string(c.tokens) +
                           " dtype " + std::to_string(static_cast<int>(dtype));
  SCOPED_TRACE(what);
  std::random_device rd;
  const uint32_t seed = rd();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t dh = c.head_dim, T = c.tokens;
  const int64_t q_stride = c.q_heads * dh + 3, kv_stride = c.k_heads * dh + 5;
  const int64_t block_size = 4, num_blocks = 6, total_slots = block_size * num_blocks;
  auto random = [&](int64_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = scale * normal(rng);
    return v;
  };
  const std::vector<float> q = random(T * q_stride, 2.f), k = random(T * kv_stride, 2.f),
                           v = random(T * kv_stride, 1.f);
  const std::vector<float> q_norm = random(dh, 1.f), k_norm = random(dh, 1.f);
  std::vector<float> freq(c.n_rot / 2);
  for (float& f : freq) f = 1.f + std::abs(normal(rng));
  std::vector<int32_t> positions(T);
  for (int32_t& p : positions) p = std::uniform_int_distribution<int32_t>(0, 70000)(rng);
  std::vector<int64_t> slots(total_slots);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(T);
  if (T > 1) slots[1] = -1;  // a row of no sequence: computed, not cached

  const size_t cache_bytes =
      static_cast<size_t>(total_slots * c.k_heads * KvVectorBytes(dtype, dh));
  ASSERT_GT(cache_bytes, 0u);
  DeviceBuffer d_qn(dh * 4), d_kn(dh * 4), d_freq(freq.size() * 4), d_pos(T * 4), d_slots(T * 8);
  ASSERT_EQ(cudaMemcpy(d_qn.ptr, q_norm.data(), dh * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_kn.ptr, k_norm.data(), dh * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_freq.ptr, freq.data(), freq.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_pos.ptr, positions.data(), T * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_slots.ptr, slots.data(), T * 8, cudaMemcpyHostToDevice), cudaSuccess);

  auto prepare = [&](Run& r, QkNormRopeCudaArgs* rope, KvAppendArgs* append) {
    ASSERT_TRUE(r.q.ptr && r.k.ptr && r.v.ptr && r.k_cache.ptr && r.v_cache.ptr);
    ASSERT_EQ(cudaMemcpy(r.q.ptr, q.data(), q.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(r.k.ptr, k.data(), k.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(r.v.ptr, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(r.k_cache.ptr, 0xA5, cache_bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(r.v_cache.ptr, 0xA5, cache_bytes), cudaSuccess);
    rope->q = static_cast<float*>(r.q.ptr);
    rope->q_stride = q_stride;
    rope->q_heads = c.q_heads;
    rope->q_norm = static_cast<const float*>(d_qn.ptr);
    rope->k = static_cast<float*>(r.k.ptr);
    rope->k_stride = kv_stride;
    rope->k_heads = c.k_heads;
    rope->k_norm = static_cast<const float*>(d_kn.ptr);
    rope->tokens = T;
    rope->head_dim = dh;
    rope->eps = 1e-5f;
    rope->positions = static_cast<const int32_t*>(d_pos.ptr);
    rope->n_rot = c.n_rot;
    rope->base = 10000.f;
    rope->freq_factors = c.freq_factors ? static_cast<const float*>(d_freq.ptr) : nullptr;
    append->k = static_cast<const float*>(r.k.ptr);
    append->k_stride = kv_stride;
    append->v = static_cast<const float*>(r.v.ptr);
    append->v_stride = kv_stride;
    append->tokens = T;
    append->slots = static_cast<const int64_t*>(d_slots.ptr);
    append->kv = PagedKv{.k = r.k_cache.ptr,
                         .v = r.v_cache.ptr,
                         .dtype = dtype,
                         .num_blocks = num_blocks,
                         .block_size = block_size,
                         .kv_heads = c.k_heads,
                         .head_dim = dh};
  };
  const size_t q_bytes = q.size() * 4, kv_bytes = k.size() * 4;
  Run two(q_bytes, kv_bytes, cache_bytes), fused(q_bytes, kv_bytes, cache_bytes);
  QkNormRopeCudaArgs rope_two, rope_fused;
  KvAppendArgs append_two, append_fused;
  ASSERT_NO_FATAL_FAILURE(prepare(two, &rope_two, &append_two));
  ASSERT_NO_FATAL_FAILURE(prepare(fused, &rope_fused, &append_fused));
  ASSERT_TRUE(QkNormRopeAppendCudaApplies(rope_fused, append_fused));
  ASSERT_EQ(QkNormRopeCuda(rope_two, nullptr), KernelStatus::kOk);
  ASSERT_EQ(KvAppendCuda(append_two, nullptr), KernelStatus::kOk);
  ASSERT_EQ(QkNormRopeAppendCuda(rope_fused, append_fused, nullptr), KernelStatus::kOk);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  EXPECT_EQ(Download(two.q.ptr, q_bytes), Download(fused.q.ptr, q_bytes)) << "q";
  EXPECT_EQ(Download(two.k.ptr, kv_bytes), Download(fused.k.ptr, kv_bytes)) << "k";
  const std::vector<uint8_t> k_two = Download(two.k_cache.ptr, cache_bytes);
  const std::vector<uint8_t> v_two = Download(two.v_cache.ptr, cache_bytes);
  EXPECT_EQ(k_two, Download(fused.k_cache.ptr, cache_bytes)) << "K cache";
  EXPECT_EQ(v_two, Download(fused.v_cache.ptr, cache_bytes)) << "V cache";
  // Not a comparison of two untouched caches: every cached row changed, the rest did not.
  const int64_t row_bytes = c.k_heads * KvVectorBytes(dtype, dh);
  for (int64_t s = 0; s < total_slots; ++s) {
    const bool written = std::find(slots.begin(), slots.end(), s) != slots.end();
    const bool poisoned =
        std::all_of(v_two.begin() + s * row_bytes, v_two.begin() + (s + 1) * row_bytes,
                    [](uint8_t b) { return b == 0xA5; });
    EXPECT_EQ(poisoned, !written) << "slot " << s;
  }
}

TEST(QkNormRopeAppendCudaTest, EqualsTheTwoKernelsBitForBit) {
  if (CudaDevices() == 0) GTEST_SKIP() << "no CUDA device visible";
  // Step-3.5 decode shapes (96 or 64 q heads, 8 KV heads, dh 128, n_rot 64 / 128), an odd
  // multi-token one with rope_freqs, and the largest head_dim with a few heads.
  const Case cases[] = {{96, 8, 128, 64, 1, false},
                        {64, 8, 128, 128, 3, true},
                        {12, 3, 64, 32, 5, true},
                        {5, 1, 256, 96, 2, false}};
  for (const Case& c : cases) {
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
