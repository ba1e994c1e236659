// The head gate in the split-K combine (PagedAttentionCudaArgs::gate): against the plain launch
// followed by HeadGateQ8Cuda / HeadGateCuda it must give the same bytes - the gated F32 rows and
// both int8 areas (natural and pair order, with their scales), poisoned alike beforehand so that
// a byte written by one path only shows - and the gated rows must match the reference attention
// times sigmoid(gate) on the host. Fresh random data: head_dim 64 / 128 / 192 (two, four and six
// int8 blocks a head), GQA groups of 4, contexts of 1-1500 keys (decode rows and two-row
// sequences), 2 and 7 splits, gate logits in [-6, 6] on a padded row stride. Also the argument
// checks: a gate without split-K, an odd head_dim, int8 areas without a gate.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "gtest/gtest.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/elementwise/elementwise_cuda.h"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "tests/gpu/attention_cuda_test_util.h"
#include "tests/gpu/backend_test_util.h"

namespace stepserve {
namespace {

using gpu_testing::CudaBackendOrNull;
using gpu_testing::kNoDeviceMessage;
using gpu_testing::RandomVector;
using gpu_testing::RelError;
using gpu_testing::UploadBytes;
using kernels::KernelStatus;

constexpr double kMaxRelError = 1e-4;

std::vector<uint8_t> DeviceBytes(const void* p, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// One shape on fresh data: the batch, its reference output (gated on the host) and the device
// copies of everything the launches read.
struct GateCase {
  int64_t dh = 0, kv_heads = 2, group = 4, heads = 0, block = 16, rows = 0, gate_stride = 0;
  std::vector<int32_t> table_words, positions;
  std::vector<kernels::AttentionSeq> seqs;
  std::vector<float> k, v, q, gate, want;
  kernels::PagedAttentionCudaBatch batch;
};

GateCase MakeCase(int64_t dh, uint32_t seed) {
  GateCase c;
  std::mt19937 rng(seed);
  c.dh = dh;
  c.heads = c.kv_heads * c.group;
  c.gate_stride = c.heads + 3;
  const std::vector<int64_t> contexts = {1, 33, 700, 1500};
  int64_t num_blocks = 0;
  for (int64_t ctx : contexts) num_blocks += (ctx + c.block - 1) / c.block;
  c.table_words.resize(num_blocks);
  std::iota(c.table_words.begin(), c.table_words.end(), 0);
  std::shuffle(c.table_words.begin(), c.table_words.end(), rng);
  int64_t at = 0;
  for (int64_t ctx : contexts) {
    kernels::AttentionSeq s;
    s.q_begin = static_cast<int64_t>(c.positions.size());
    s.q_count = ctx > 600 ? 2 : 1;
    s.context_len = ctx;
    s.block_table = c.table_words.data() + at;
    s.block_table_len = (ctx + c.block - 1) / c.block;
    at += s.block_table_len;
    for (int64_t p = ctx - s.q_count; p < ctx; ++p) c.positions.push_back(static_cast<int32_t>(p));
    c.seqs.push_back(s);
  }
  c.rows = static_cast<int64_t>(c.positions.size());
  const size_t cache_floats = static_cast<size_t>(num_blocks * c.block * c.kv_heads * dh);
  c.k = RandomVector(cache_floats, 1.0f, rng);
  c.v = RandomVector(cache_floats, 1.0f, rng);
  c.q = RandomVector(c.rows * c.heads * dh, 3.0f, rng);
  c.gate = RandomVector(c.rows * c.gate_stride, 6.0f, rng);
  c.want.assign(c.rows * c.heads * dh, 0.0f);
  kernels::PagedAttentionArgs host;
  host.q = c.q.data();
  host.q_stride = c.heads * dh;
  host.out = c.want.data();
  host.out_stride = c.heads * dh;
  host.positions = c.positions.data();
  host.seqs = c.seqs.data();
  host.n_seqs = static_cast<int64_t>(c.seqs.size());
  host.heads = c.heads;
  host.window = 0;
  host.scale = 0.125f;
  host.kv = {c.k.data(), c.v.data(), KvDtype::kF32, num_blocks, c.block, c.kv_heads, dh};
  EXPECT_EQ(kernels::PagedAttentionRef(host), KernelStatus::kOk);
  EXPECT_EQ(kernels::FlattenPagedAttentionBatch(host, &c.batch), KernelStatus::kOk);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const float s = 1.0f / (1.0f + std::exp(-c.gate[r * c.gate_stride + h]));
      for (int64_t d = 0; d < dh; ++d) c.want[(r * c.heads + h) * dh + d] *= s;
    }
  }
  return c;
}

TEST(PagedAttentionCudaGateTest, GateInCombineEqualsHeadGateAfter) {
  std::unique_ptr<Backend> cuda = CudaBackendOrNull();
  if (!cuda) GTEST_SKIP() << kNoDeviceMessage;
  uint32_t seed = 900;
  for (int64_t dh : {64, 128, 192}) {
    const GateCase c = MakeCase(dh, seed++);
    const int64_t width = c.heads * dh;
    const size_t out_bytes = static_cast<size_t>(c.rows * width) * sizeof(float);
    const size_t q8_bytes = static_cast<size_t>(
        kernels::gemv_internal::Q8ScalesOffset(width, c.rows) + c.rows * (width / 32) * 8);
    BackendBuffer dk = UploadBytes(*cuda, c.k.data(), c.k.size() * 4);
    BackendBuffer dv = UploadBytes(*cuda, c.v.data(), c.v.size() * 4);
    BackendBuffer dq = UploadBytes(*cuda, c.q.data(), c.q.size() * 4);
    BackendBuffer dgate = UploadBytes(*cuda, c.gate.data(), c.gate.size() * 4);
    BackendBuffer dwords = UploadBytes(*cuda, c.batch.words.data(), c.batch.words.size() * 4);
    absl::StatusOr<BackendBuffer> out = cuda->Allocate(out_bytes);
    absl::StatusOr<BackendBuffer> q8 = cuda->Allocate(4 * q8_bytes);  // 2 paths x 2 orders
    ASSERT_TRUE(out.ok() && q8.ok());
    // The kernels run on the legacy default stream, which does not wait for the backend's.
    ASSERT_TRUE(cuda->Synchronize().ok());
    for (int64_t splits : {2, 7}) {
      for (bool with_q8 : {true, false}) {
        SCOPED_TRACE(absl::StrFormat("head_dim %d, %d splits, int8 rows %d", dh, splits, with_q8));
        kernels::PagedAttentionCudaArgs a;
        a.q = static_cast<const float*>(dq.data());
        a.q_stride = width;
        a.out = static_cast<float*>(out->data());
        a.out_stride = width;
        a.rows = static_cast<const kernels::PagedAttentionCudaRow*>(dwords.data());
        a.n_rows = c.batch.n_rows;
        a.block_tables = static_cast<const int32_t*>(dwords.data()) + c.batch.tables_offset;
        a.heads = c.heads;
        a.scale = 0.125f;
        a.kv = {dk.data(),
                dv.data(),
                KvDtype::kF32,
                static_cast<int64_t>(c.table_words.size()),
                c.block,
                c.kv_heads,
                dh};
        a.splits = splits;
        a.scratch_bytes = kernels::PagedAttentionCudaScratchBytes(c.rows, c.heads, dh, splits);
        absl::StatusOr<BackendBuffer> scratch = cuda->Allocate(a.scratch_bytes);
        ASSERT_TRUE(scratch.ok());
        a.scratch = scratch->data();
        ASSERT_TRUE(kernels::PagedAttentionCudaCombineGates(a));
        uint8_t* areas = static_cast<uint8_t*>(q8->data());
        kernels::HeadGateArgs g;
        g.o = a.out;
        g.o_stride = width;
        g.gate = static_cast<const float*>(dgate.data());
        g.gate_stride = c.gate_stride;
        g.rows = c.rows;
        g.heads = c.heads;
        g.head_dim = dh;
        std::vector<uint8_t> got_out[2], got_q8[2];
        for (int path = 0; path < 2; ++path) {  // 0: the launch, then the head gate; 1: fused
          ASSERT_EQ(cudaMemset(a.out, 0xFF, out_bytes), cudaSuccess);  // NaN
          ASSERT_EQ(cudaMemset(a.scratch, 0xFF, a.scratch_bytes), cudaSuccess);
          ASSERT_EQ(cudaMemset(areas, 0x5A, 4 * q8_bytes), cudaSuccess);
          uint8_t* natural = areas + 2 * path * q8_bytes;
          uint8_t* pair = natural + q8_bytes;
          if (path == 0) {
            a.gate = nullptr;
            a.q8_natural = a.q8_pair = nullptr;
            ASSERT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kOk);
            ASSERT_EQ(with_q8 ? kernels::HeadGateQ8Cuda(g, natural, pair, nullptr)
                              : kernels::HeadGateCuda(g, nullptr),
                      KernelStatus::kOk);
          } else {
            a.gate = g.gate;
            a.gate_stride = g.gate_stride;
            a.q8_natural = with_q8 ? natural : nullptr;
            a.q8_pair = with_q8 ? pair : nullptr;
            a.q8_rows = c.rows;
            ASSERT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kOk);
          }
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          got_out[path] = DeviceBytes(a.out, out_bytes);
          got_q8[path] = DeviceBytes(natural, 2 * q8_bytes);
        }
        EXPECT_EQ(got_out[0], got_out[1]) << "gated F32 rows";
        EXPECT_EQ(got_q8[0], got_q8[1]) << "int8 rows (natural, then pair order)";
        if (with_q8) {
          // The fused areas were written (not the poison the unfused path left alone too).
          EXPECT_NE(got_q8[1], std::vector<uint8_t>(got_q8[1].size(), 0x5A));
        }
        std::vector<float> gated(c.want.size());
        std::memcpy(gated.data(), got_out[1].data(), out_bytes);
        EXPECT_LE(RelError(gated, c.want), gpu_testing::MmaDecodeTakes(KvDtype::kF32, dh, c.group)
                                               ? gpu_testing::kMaxRelErrorMmaDecode
                                               : kMaxRelError);
      }
    }
  }
}

TEST(PagedAttentionCudaGateTest, RejectsGatesItCannotApply) {
  kernels::PagedAttentionCudaArgs a;
  alignas(16) static float buffer[4096];
  alignas(16) static float gate[64];
  a.q = buffer;
  a.q_stride = 8 * 64;
  a.out = buffer;
  a.out_stride = 8 * 64;
  a.heads = 8;
  a.scale = 0.125f;
  a.kv = {buffer, buffer, KvDtype::kF32, 4, 16, 2, 64};
  a.gate = gate;
  a.gate_stride = 8;
  // One pass (no split-K): the gate has no combine to go into.
  EXPECT_FALSE(kernels::PagedAttentionCudaCombineGates(a));
  EXPECT_EQ(kernels::ValidatePagedAttentionCudaArgs(a), KernelStatus::kInvalidArgument);
  a.splits = 2;
  a.scratch = buffer;
  a.scratch_bytes = kernels::PagedAttentionCudaScratchBytes(0, 8, 64, 2);
  EXPECT_TRUE(kernels::PagedAttentionCudaCombineGates(a));
  EXPECT_EQ(kernels::ValidatePagedAttentionCudaArgs(a), KernelStatus::kOk);
  a.gate_stride = 7;  // narrower than the heads
  EXPECT_EQ(kernels::ValidatePagedAttentionCudaArgs(a), KernelStatus::kInvalidArgument);
  a.gate_stride = 8;
  a.q8_natural = buffer;  // one int8 area without the other
  EXPECT_EQ(kernels::ValidatePagedAttentionCudaArgs(a), KernelStatus::kInvalidArgument);
  a.q8_pair = buffer;
  a.q8_rows = 1;
  EXPECT_EQ(kernels::ValidatePagedAttentionCudaArgs(a), KernelStatus::kOk);
  a.gate = nullptr;  // int8 areas without a gate
  EXPECT_EQ(kernels::ValidatePagedAttentionCudaArgs(a), KernelStatus::kInvalidArgument);
  a.gate = gate;
  a.kv.head_dim = 48;  // blocks of 32 would straddle heads
  a.q_stride = a.out_stride = 8 * 48;
  EXPECT_FALSE(kernels::PagedAttentionCudaCombineGates(a));
  EXPECT_EQ(kernels::ValidatePagedAttentionCudaArgs(a), KernelStatus::kInvalidArgument);
}

}  // namespace
}  // namespace stepserve
