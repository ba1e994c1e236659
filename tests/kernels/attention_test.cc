// Paged attention against a dense reference computed in the test from contiguous K/V arrays:
// block size 16, scattered (non-contiguous) block tables, sliding windows past the window, GQA
// ratios 2/3/8, head dims 32/128/192, a ragged batch of prefill and decode rows.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/quant/float16.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"
#include "kernels/attention/paged_attention.h"
#include "tests/kernels/test_util.h"

namespace stepserve::kernels {
namespace {

using testing::Poisoned;
using testing::RandomVector;
using testing::RelError;

struct Case {
  int64_t heads, kv_heads, head_dim, window;
  std::vector<int64_t> context;  // per sequence
  std::vector<int64_t> queries;  // per sequence: the last `queries` positions are queried
  KvDtype dtype = KvDtype::kF32;
};

void RunCase(const Case& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "H=" << c.heads << " G=" << c.kv_heads
                                    << " Dh=" << c.head_dim << " W=" << c.window);
  constexpr int64_t kBlock = 16;
  const int64_t width = c.kv_heads * c.head_dim;
  const int64_t n_seqs = static_cast<int64_t>(c.context.size());
  // Give every sequence pages from a shuffled pool so tables are non-contiguous.
  int64_t total_pages = 0;
  for (int64_t ctx : c.context) total_pages += (ctx + kBlock - 1) / kBlock;
  std::vector<int32_t> pool_pages(total_pages + 3);
  std::iota(pool_pages.begin(), pool_pages.end(), 0);
  std::shuffle(pool_pages.begin(), pool_pages.end(), std::mt19937(seed));
  const int64_t num_blocks = total_pages + 3;
  const int64_t vec_bytes = KvVectorBytes(c.dtype, c.head_dim);
  ASSERT_GT(vec_bytes, 0);
  const size_t page_bytes = num_blocks * kBlock * c.kv_heads * vec_bytes;
  std::vector<uint8_t> k_pages(page_bytes, 0xFF);  // NaN-ish filler
  std::vector<uint8_t> v_pages(page_bytes, 0xFF);
  PagedKv kv{k_pages.data(), v_pages.data(), c.dtype, num_blocks, kBlock, c.kv_heads, c.head_dim};

  std::vector<std::vector<int32_t>> tables(n_seqs);
  std::vector<std::vector<float>> dense_k(n_seqs), dense_v(n_seqs);
  std::vector<AttentionSeq> seqs(n_seqs);
  std::vector<int32_t> positions;
  int64_t next_page = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t ctx = c.context[s];
    for (int64_t b = 0; b < (ctx + kBlock - 1) / kBlock; ++b) {
      tables[s].push_back(pool_pages[next_page++]);
    }
    dense_k[s] = RandomVector(ctx * width, seed * 31 + s);
    dense_v[s] = RandomVector(ctx * width, seed * 37 + s);
    if (c.dtype == KvDtype::kF16) {  // the reference sees the rounded values
      for (float& f : dense_k[s]) f = F16ToF32(F32ToF16(f));
      for (float& f : dense_v[s]) f = F16ToF32(F32ToF16(f));
    }
    if (c.dtype == KvDtype::kQ8_0) {  // likewise, decoded by the GGUF Q8_0 dequantizer
      std::vector<uint8_t> blocks(vec_bytes);
      for (std::vector<float>* dense : {&dense_k[s], &dense_v[s]}) {
        for (int64_t i = 0; i < static_cast<int64_t>(dense->size()); i += c.head_dim) {
          ASSERT_TRUE(
              quant::QuantizeRow(GgmlType::kQ8_0, dense->data() + i, blocks.data(), c.head_dim)
                  .ok());
          ASSERT_TRUE(
              quant::DequantizeRow(GgmlType::kQ8_0, blocks.data(), dense->data() + i, c.head_dim)
                  .ok());
        }
      }
    }
    std::vector<int64_t> slots(ctx);
    for (int64_t p = 0; p < ctx; ++p) slots[p] = tables[s][p / kBlock] * kBlock + p % kBlock;
    KvAppendArgs append{dense_k[s].data(), width, dense_v[s].data(), width, ctx, slots.data(), kv};
    ASSERT_EQ(KvAppendCpu(append, nullptr), KernelStatus::kOk);
    seqs[s] = {static_cast<int64_t>(positions.size()), c.queries[s], ctx, tables[s].data(),
               static_cast<int64_t>(tables[s].size())};
    for (int64_t p = ctx - c.queries[s]; p < ctx; ++p) positions.push_back(static_cast<int32_t>(p));
  }
  const int64_t rows = static_cast<int64_t>(positions.size());
  const int64_t q_width = c.heads * c.head_dim;
  std::vector<float> q = RandomVector(rows * q_width, seed + 99);
  PagedAttentionArgs a;
  a.q = q.data();
  a.q_stride = q_width;
  a.out_stride = q_width;
  a.positions = positions.data();
  a.seqs = seqs.data();
  a.n_seqs = n_seqs;
  a.heads = c.heads;
  a.window = c.window;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.kv = kv;

  // Dense reference written here from the spec (independent of the paged addressing).
  std::vector<float> want(rows * q_width);
  const int64_t group = c.heads / c.kv_heads;
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t r = seqs[s].q_begin; r < seqs[s].q_begin + seqs[s].q_count; ++r) {
      const int64_t p = positions[r];
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t g = h / group;
        std::vector<double> w;
        std::vector<int64_t> seen;
        for (int64_t pp = 0; pp <= p; ++pp) {
          if (c.window > 0 && p - pp >= c.window) continue;  // masked: outside the window
          double dot = 0;
          for (int64_t d = 0; d < c.head_dim; ++d) {
            dot += double{q[r * q_width + h * c.head_dim + d]} *
                   dense_k[s][pp * width + g * c.head_dim + d];
          }
          w.push_back(dot * a.scale);
          seen.push_back(pp);
        }
        const double mx = *std::max_element(w.begin(), w.end());
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < c.head_dim; ++d) {
          double acc = 0;
          for (size_t i = 0; i < seen.size(); ++i) {
            acc += w[i] / sum * dense_v[s][seen[i] * width + g * c.head_dim + d];
          }
          want[r * q_width + h * c.head_dim + d] = static_cast<float>(acc);
        }
      }
    }
  }
  std::vector<float> ref = Poisoned(rows * q_width);
  a.out = ref.data();
  ASSERT_EQ(PagedAttentionRef(a), KernelStatus::kOk);
  EXPECT_LT(RelError(ref, want), 1e-6);
  ThreadPool pool(3);
  std::vector<float> got = Poisoned(rows * q_width);
  a.out = got.data();
  ASSERT_EQ(PagedAttentionCpu(a, &pool), KernelStatus::kOk);
  EXPECT_LT(RelError(got, want), 1e-5);
}

TEST(PagedAttentionTest, FullCausalGqa8HeadDim128) {
  RunCase({16, 2, 128, 0, {37, 5, 70}, {37, 1, 3}}, 1);  // prefill, decode, verify-like rows
}

TEST(PagedAttentionTest, SlidingWindowPastTheWindowGqa3HeadDim32) {
  RunCase({6, 2, 32, 20, {90, 41}, {9, 1}}, 2);  // positions 81..89 with W = 20
}

TEST(PagedAttentionTest, SlidingWindowGqa2HeadDim192) { RunCase({4, 2, 192, 17, {50}, {4}}, 3); }

TEST(PagedAttentionTest, F16CacheGqa8) { RunCase({8, 1, 32, 0, {33}, {2}, KvDtype::kF16}, 4); }

TEST(PagedAttentionTest, Q8CacheGqa8HeadDim128) {
  RunCase({8, 1, 128, 0, {33, 70}, {2, 1}, KvDtype::kQ8_0}, 5);
}

TEST(PagedAttentionTest, Q8CacheSlidingWindowHeadDim192) {
  RunCase({4, 2, 192, 17, {50}, {4}, KvDtype::kQ8_0}, 6);
}

TEST(PagedAttentionTest, Q8CacheNeedsHeadDimMultipleOf32) {
  EXPECT_EQ(KvVectorBytes(KvDtype::kQ8_0, 128), 4 * 34);
  EXPECT_EQ(KvVectorBytes(KvDtype::kQ8_0, 48), 0);
  float k = 0, v = 0;
  std::vector<uint8_t> pages(1024);
  const int64_t slot = 0;
  KvAppendArgs append{
      &k, 48, &v, 48, 1, &slot, PagedKv{pages.data(), pages.data(), KvDtype::kQ8_0, 1, 16, 1, 48}};
  EXPECT_EQ(KvAppendCpu(append, nullptr), KernelStatus::kInvalidArgument);
}

TEST(PagedAttentionTest, SlidingWindowIgnoresFreedPages) {
  // Pages entirely before the window may be released (-1): they must not be read.
  constexpr int64_t kBlock = 16, kDh = 32;
  std::vector<float> k(4 * kBlock * kDh, 0.5f), v(4 * kBlock * kDh, 1.0f);
  PagedKv kv{k.data(), v.data(), KvDtype::kF32, 4, kBlock, 1, kDh};
  std::vector<int32_t> table = {-1, -1, 3, 1};
  AttentionSeq seq{0, 1, 60, table.data(), 4};
  int32_t pos = 59;
  std::vector<float> q(kDh, 0.1f), out = Poisoned(kDh);
  PagedAttentionArgs a;
  a.q = q.data();
  a.q_stride = kDh;
  a.out = out.data();
  a.out_stride = kDh;
  a.positions = &pos;
  a.seqs = &seq;
  a.n_seqs = 1;
  a.heads = 1;
  a.window = 20;
  a.scale = 0.2f;
  a.kv = kv;
  ASSERT_EQ(PagedAttentionCpu(a, nullptr), KernelStatus::kOk);
  for (float o : out) EXPECT_FLOAT_EQ(o, 1.0f);
  a.window = 0;  // full attention needs the freed pages: reported, not read
  EXPECT_EQ(PagedAttentionCpu(a, nullptr), KernelStatus::kOutOfRange);
}

}  // namespace
}  // namespace stepserve::kernels
