// The tensor-core decode attention (STEPSERVE_ATTN_MMA_DECODE, paged_attention_cuda_mma.cuh)
// against PagedAttentionRef on fresh random data: F32 and F16 pages, head dims 128 and 192,
// groups 5 / 8 / 12 / 16 (one and two head tiles of the MMA), full and sliding-window attention,
// contexts of 1, 31, 33, 256 and 700 keys (two query rows on the longest: speculative
// verification), strided Q / output rows, forced split counts 1, 2, 7, 8 and 64 (empty trailing
// splits of the short rows). Outputs and split-K partials NaN-poisoned before each launch; the
// output rows' padding must stay NaN.
//
// Bound on ||out - ref|| / ||ref||: 4e-3. Q, K, P and V are rounded to F16 on the MMA's inputs
// (prefill_attention_cuda_test.cc derives ~1e-3 for the same rounding); the host emulation of
// the same cases (tests/cuda_emu/paged_attention, `emu_test 0 mma`) measured at most 4e-4. An
// indexing, masking or softmax error gives errors of order 1.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/quant/float16.h"
#include "gtest/gtest.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "tests/gpu/attention_cuda_test_util.h"
#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/cuda_test_util.h"

namespace stepserve {
namespace {

using gpu_testing::RandomVector;
using kernels::KernelStatus;
using kernels::KvDtype;
using kernels::testing::CopyToDevice;
using kernels::testing::DeviceBuffer;
using kernels::testing::HaveCudaDevice;

constexpr double kMaxRelError = gpu_testing::kMaxRelErrorMmaDecode;

void RunShape(KvDtype dtype, int64_t dh, int64_t group, int64_t window, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t kv_heads = 2, heads = kv_heads * group, block = 16, pad = 4;
  const gpu_testing::DecodeSeqs batch_seqs({1, 31, 33, 256, 700}, block, 2, rng);
  const int64_t num_blocks = batch_seqs.num_blocks;
  const int64_t rows = batch_seqs.rows();
  const int64_t width = heads * dh, stride = width + pad;
  const size_t cache_values = static_cast<size_t>(num_blocks * block * kv_heads * dh);
  std::vector<float> k = RandomVector(cache_values, 1.0f, rng);
  std::vector<float> v = RandomVector(cache_values, 1.0f, rng);
  std::vector<float> q = RandomVector(static_cast<size_t>(rows * stride), 3.0f, rng);
  // F16 pages: the reference reads the same halves.
  std::vector<uint16_t> k16, v16;
  const void* host_k = k.data();
  const void* host_v = v.data();
  size_t cache_bytes = cache_values * sizeof(float);
  if (dtype == KvDtype::kF16) {
    for (float x : k) k16.push_back(F32ToF16(x));
    for (float x : v) v16.push_back(F32ToF16(x));
    host_k = k16.data();
    host_v = v16.data();
    cache_bytes = cache_values * sizeof(uint16_t);
  }
  std::vector<float> want(static_cast<size_t>(rows * stride), 0.0f);
  const kernels::PagedAttentionArgs host =
      gpu_testing::RefArgs(batch_seqs, q.data(), want.data(), stride, heads, window,
                           1.0f / std::sqrt(static_cast<float>(dh)),
                           {const_cast<void*>(host_k), const_cast<void*>(host_v), dtype, num_blocks,
                            block, kv_heads, dh});
  ASSERT_EQ(kernels::PagedAttentionRef(host), KernelStatus::kOk);
  kernels::PagedAttentionCudaBatch batch;
  ASSERT_EQ(kernels::FlattenPagedAttentionBatch(host, &batch), KernelStatus::kOk);

  DeviceBuffer dk(cache_bytes), dv(cache_bytes), dq(q.size() * sizeof(float));
  DeviceBuffer dout(q.size() * sizeof(float)), dwords(batch.words.size() * sizeof(int32_t));
  ASSERT_TRUE(dk.ptr && dv.ptr && dq.ptr && dout.ptr && dwords.ptr);
  ASSERT_TRUE(CopyToDevice(dk.ptr, host_k, cache_bytes));
  ASSERT_TRUE(CopyToDevice(dv.ptr, host_v, cache_bytes));
  ASSERT_TRUE(CopyToDevice(dq.ptr, q.data(), q.size() * sizeof(float)));
  ASSERT_TRUE(CopyToDevice(dwords.ptr, batch.words.data(), batch.words.size() * sizeof(int32_t)));
  for (int64_t splits : {1, 2, 7, 8, 64}) {
    SCOPED_TRACE(absl::StrFormat("splits %d", splits));
    kernels::PagedAttentionCudaArgs a =
        gpu_testing::DeviceAttentionArgs(host, batch, dq.ptr, dout.ptr, dwords.ptr, dk.ptr, dv.ptr);
    a.splits = splits;
    a.scratch_bytes = kernels::PagedAttentionCudaScratchBytes(rows, heads, dh, splits);
    DeviceBuffer scratch(static_cast<size_t>(std::max<int64_t>(a.scratch_bytes, 16)));
    ASSERT_NE(scratch.ptr, nullptr);
    a.scratch = scratch.ptr;
    ASSERT_TRUE(kernels::PagedAttentionCudaMmaSupports(a));
    ASSERT_EQ(cudaMemset(a.out, 0xFF, q.size() * sizeof(float)), cudaSuccess);  // NaN
    ASSERT_EQ(cudaMemset(a.scratch, 0xFF, static_cast<size_t>(a.scratch_bytes)), cudaSuccess);
    const int64_t launches = kernels::PagedAttentionCudaMmaLaunches();
    {
      gpu_testing::MmaDecodeScope mma(true);
      ASSERT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kOk);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(kernels::PagedAttentionCudaMmaLaunches() - launches, 1);
    std::vector<float> got(q.size());
    ASSERT_EQ(cudaMemcpy(got.data(), a.out, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<float> got_rows, want_rows;
    int64_t padding_written = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < stride; ++i) {
        const size_t at_i = static_cast<size_t>(r * stride + i);
        if (i >= width) {
          padding_written += std::isnan(got[at_i]) ? 0 : 1;
        } else {
          got_rows.push_back(got[at_i]);
          want_rows.push_back(want[at_i]);
        }
      }
    }
    EXPECT_EQ(padding_written, 0);
    EXPECT_LE(gpu_testing::RelError(got_rows, want_rows), kMaxRelError);
  }
}

TEST(AttentionMmaCudaTest, MatchesReference) {
  if (!HaveCudaDevice()) GTEST_SKIP() << gpu_testing::kNoDeviceMessage;
  uint32_t seed = 11;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16}) {
    for (int64_t dh : {128, 192}) {
      for (int64_t group : {5, 8, 12, 16}) {
        for (int64_t window : {0, 37}) {
          SCOPED_TRACE(absl::StrFormat("dtype %d head_dim %d group %d window %d",
                                       static_cast<int>(dtype), dh, group, window));
          RunShape(dtype, dh, group, window, seed++);
        }
      }
    }
  }
}

// Where the kernel does not apply, PagedAttentionCuda keeps the scalar kernel.
TEST(AttentionMmaCudaTest, SupportsOnlyItsShapes) {
  kernels::PagedAttentionCudaArgs a;
  alignas(16) static float buffer[64];
  a.q = buffer;
  a.out = buffer;
  a.q_stride = a.out_stride = 16 * 128;
  a.heads = 16;
  a.kv = {buffer, buffer, KvDtype::kF32, 1, 16, 1, 128};
  EXPECT_TRUE(kernels::PagedAttentionCudaMmaSupports(a));
  kernels::PagedAttentionCudaArgs b = a;
  b.kv.dtype = KvDtype::kQ8_0;
  EXPECT_FALSE(kernels::PagedAttentionCudaMmaSupports(b));
  b = a;
  b.kv.head_dim = 64;
  EXPECT_FALSE(kernels::PagedAttentionCudaMmaSupports(b));
  b = a;
  b.heads = 20;  // a group of 20: more than the MMA's 16 rows
  EXPECT_FALSE(kernels::PagedAttentionCudaMmaSupports(b));
  b = a;
  b.q_stride = 16 * 128 + 2;  // Q rows not 16-byte aligned
  EXPECT_FALSE(kernels::PagedAttentionCudaMmaSupports(b));
  b = a;
  b.out = buffer + 1;  // output rows not 8-byte aligned
  EXPECT_FALSE(kernels::PagedAttentionCudaMmaSupports(b));
}

}  // namespace
}  // namespace stepserve
