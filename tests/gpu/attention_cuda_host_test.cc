// Host side of the CUDA paged attention (kernels/attention/paged_attention_cuda_plan.cc and the
// launcher's argument checks): batch flattening, the split-K and heads-per-CTA choices, the
// combine switch, rejected arguments. Runs without a device (part of attention_cuda_test).
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "tests/gpu/attention_cuda_test_util.h"

namespace stepserve {
namespace {

using kernels::KernelStatus;
using kernels::KvDtype;

TEST(PagedAttentionCudaHostTest, FlattensRowsAndCutTables) {
  const std::vector<int32_t> table_a = {5, 6, 7, 8};        // context 20 of block 8: 3 entries used
  const std::vector<int32_t> table_b = {-1, 4, 2};          // window 4 at position 17: pages 1, 2
  const std::vector<int32_t> positions = {99, 18, 19, 17};  // row 0 belongs to no sequence
  std::vector<kernels::AttentionSeq> seqs(3);
  seqs[0] = {1, 2, 20, table_a.data(), 4};
  seqs[1] = {3, 0, 0, nullptr, 0};  // no rows: skipped
  seqs[2] = {3, 1, 18, table_b.data(), 3};
  float dummy = 0.0f;
  int dummy_cache = 0;
  kernels::PagedAttentionArgs a;
  a.q = &dummy;
  a.out = &dummy;
  a.q_stride = a.out_stride = 2 * 8;
  a.positions = positions.data();
  a.seqs = seqs.data();
  a.n_seqs = 3;
  a.heads = 2;
  a.window = 4;
  a.scale = 0.5f;
  a.kv = {&dummy_cache, &dummy_cache, KvDtype::kF32, 10, 8, 1, 8};
  kernels::PagedAttentionCudaBatch batch;
  ASSERT_EQ(kernels::FlattenPagedAttentionBatch(a, &batch), KernelStatus::kOk);
  EXPECT_EQ(batch.n_rows, 3);
  EXPECT_EQ(batch.tables_offset, 12);
  EXPECT_EQ(batch.max_visible, 4);
  const std::vector<int32_t> want = {1, 18, 0, 0, 2, 19, 0, 0, 3, 17, 3, 0, 5, 6, 7, -1, 4, 2};
  EXPECT_EQ(batch.words, want);
  // A freed page inside a row's window (position 17 sees 6..17) is rejected as the CPU does.
  a.window = 12;
  EXPECT_EQ(kernels::FlattenPagedAttentionBatch(a, &batch), KernelStatus::kOutOfRange);
}

TEST(PagedAttentionCudaHostTest, SplitsOnlyLongContextsOnSmallGrids) {
  auto is_pow2 = [](int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  EXPECT_EQ(kernels::PagedAttentionCudaSplits(1, 64, 8, 50, 132), 1);   // short
  EXPECT_EQ(kernels::PagedAttentionCudaSplits(1, 64, 8, 100, 132), 4);  // 100 / 32 keys
  // (the default target: 8 CTAs per multiprocessor, 1056 on 132; unset STEPSERVE_ATTN_CTAS_PER_SM)
  EXPECT_EQ(kernels::PagedAttentionCudaSplits(132, 64, 8, 5000, 132), 1);    // grid full
  EXPECT_EQ(kernels::PagedAttentionCudaSplits(64, 64, 8, 5000, 132), 2);     // 1056 / 512 -> 2
  EXPECT_EQ(kernels::PagedAttentionCudaSplits(1, 96, 8, 256, 132), 8);       // 256 / 32 keys
  const int64_t s = kernels::PagedAttentionCudaSplits(1, 64, 8, 5000, 132);  // 8 CTAs
  EXPECT_EQ(s, 64);  // 1056 / 8 = 132 splits wanted, capped at kPagedAttentionCudaMaxSplits
  EXPECT_TRUE(is_pow2(kernels::PagedAttentionCudaSplits(3, 64, 8, 3000, 132)));
  EXPECT_EQ(kernels::PagedAttentionCudaSplits(1, 8, 8, 1 << 20, 132), 64);
  EXPECT_LE(kernels::PagedAttentionCudaSplits(1, 1, 1, 1 << 20, 132),
            kernels::kPagedAttentionCudaMaxSplits);
}

TEST(PagedAttentionCudaHostTest, HeadsPerCtaSpreadOnlySmallGrids) {
  using kernels::PagedAttentionCudaCtaHeads;
  gpu_testing::CtaHeadsScope rule(0);
  // Step-3.5-Flash decode (8 KV heads, groups of 8, 8 splits) on 132 multiprocessors.
  EXPECT_EQ(PagedAttentionCudaCtaHeads(1, 8, 8, 8, 132), 4);   // 64 CTAs -> 128
  EXPECT_EQ(PagedAttentionCudaCtaHeads(1, 12, 8, 8, 132), 6);  // 64 -> 128 (4 heads: 192)
  EXPECT_EQ(PagedAttentionCudaCtaHeads(2, 8, 8, 8, 132), 8);   // 256 would pass one wave
  EXPECT_EQ(PagedAttentionCudaCtaHeads(4, 8, 8, 8, 132), 8);
  EXPECT_EQ(PagedAttentionCudaCtaHeads(1, 8, 8, 1, 132), 4);     // short context, no split
  EXPECT_EQ(PagedAttentionCudaCtaHeads(1, 16, 2, 4, 132), 4);    // 8 -> 16 -> 32 CTAs, floor 4
  EXPECT_EQ(PagedAttentionCudaCtaHeads(1, 3, 8, 8, 132), 3);     // under the floor already
  EXPECT_EQ(PagedAttentionCudaCtaHeads(1, 20, 1, 1, 132), 4);    // 16 -> 8 -> 4 (5 CTAs)
  EXPECT_EQ(PagedAttentionCudaCtaHeads(1, 8, 8, 8, 0), 8);       // SM count unknown: whole group
  EXPECT_EQ(PagedAttentionCudaCtaHeads(1, 40, 1, 64, 132), 16);  // 3 x 64 CTAs: at most 16
  {
    gpu_testing::CtaHeadsScope fixed(3);
    EXPECT_EQ(PagedAttentionCudaCtaHeads(64, 8, 8, 1, 132), 3);
    EXPECT_EQ(PagedAttentionCudaCtaHeads(1, 2, 8, 8, 132), 2);
  }
  EXPECT_EQ(kernels::SetPagedAttentionCudaCtaHeads(99), 0);  // clamped to 16
  EXPECT_EQ(kernels::SetPagedAttentionCudaCtaHeads(0), 16);
}

TEST(PagedAttentionCudaHostTest, ArrivalCountsAndCombineSwitch) {
  EXPECT_EQ(kernels::PagedAttentionCudaArrivalCount(3, 64, 8), 24);  // group 8: one pass
  EXPECT_EQ(kernels::PagedAttentionCudaArrivalCount(3, 40, 2), 12);  // group 20: two passes
  EXPECT_EQ(kernels::PagedAttentionCudaArrivalCount(0, 64, 8), 0);
  const bool initial = kernels::PagedAttentionCudaFusedCombine();
  EXPECT_EQ(kernels::SetPagedAttentionCudaFusedCombine(!initial), initial);
  EXPECT_EQ(kernels::PagedAttentionCudaFusedCombine(), !initial);
  EXPECT_EQ(kernels::SetPagedAttentionCudaFusedCombine(initial), !initial);
}

TEST(PagedAttentionCudaHostTest, RejectsBadArgumentsWithoutLaunching) {
  int dummy = 0;
  kernels::PagedAttentionCudaArgs a;
  a.q = reinterpret_cast<const float*>(&dummy);
  a.out = reinterpret_cast<float*>(&dummy);
  a.q_stride = a.out_stride = 4 * 64;
  a.heads = 4;
  a.scale = 0.125f;
  a.kv = {&dummy, &dummy, KvDtype::kF32, 4, 16, 2, 64};
  EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kOk);  // no rows: no launch
  a.n_rows = 1;
  EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kInvalidArgument);  // no rows
  a.rows = reinterpret_cast<const kernels::PagedAttentionCudaRow*>(&dummy);
  a.block_tables = &dummy;
  a.splits = 2;  // no scratch
  EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kInvalidArgument);
  a.splits = 65;
  EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kInvalidArgument);
  a.splits = 1;
  int32_t counters[2] = {};
  a.split_arrivals = counters;
  a.split_arrival_count = 1;  // one per (row, KV head): 2
  EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kInvalidArgument);
  a.split_arrivals = nullptr;
  a.split_arrival_count = 0;
  a.heads = 3;  // not a multiple of kv_heads
  EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kInvalidArgument);
  a.heads = 4;
  a.kv.dtype = static_cast<KvDtype>(7);
  EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kUnsupportedType);
  a.kv.dtype = KvDtype::kF32;
  a.kv.head_dim = 1024;
  a.q_stride = a.out_stride = 4 * 1024;
  EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kTooLarge);

  kernels::KvAppendArgs append;
  append.k = append.v = reinterpret_cast<const float*>(&dummy);
  append.slots = reinterpret_cast<const int64_t*>(&dummy);
  append.k_stride = append.v_stride = 2 * 64;
  append.kv = {&dummy, &dummy, KvDtype::kF16, 4, 16, 2, 64};
  EXPECT_EQ(kernels::KvAppendCuda(append, nullptr), KernelStatus::kOk);  // no tokens: no launch
  append.k_stride = 64;
  append.tokens = 1;
  EXPECT_EQ(kernels::KvAppendCuda(append, nullptr), KernelStatus::kInvalidArgument);
}

}  // namespace
}  // namespace stepserve
