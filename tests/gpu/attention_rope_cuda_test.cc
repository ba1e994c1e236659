// The decode attention with its own q / k norm + RoPE and KV append (PagedAttentionCudaArgs::rope)
// against what it replaces: QkNormRopeAppendCuda then PagedAttentionCuda (each checked against the
// CPU in rope_append_cuda_test / attention_cuda_test). The outputs bit for bit and the K / V caches
// byte for byte, on fresh random data (caches filled with random older keys, the new rows' slots
// poisoned, outputs poisoned), F32 and F16 pages, plain decode batches of 1-3 sequences with
// contexts from 1 to 700 keys, the new key in a first or a later chunk of its split, 1-8 splits,
// full and partial rotation with and without rope_freqs, a sliding window, CTAs of 4, 8 and 16
// heads (the compact kernels and the 16-head one). Plus the host-side rule
// (PagedAttentionCudaRopeApplies).
#include <cuda_fp16.h>
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

namespace stepserve::kernels {
namespace {

using testing::DeviceBuffer;

constexpr int64_t kHeadDim = 128;
constexpr int64_t kBlock = 16;

struct RopeAttentionCase {
  int64_t kv_heads, group, n_rot;
  bool freq_factors;
  int64_t window;
  std::vector<int64_t> contexts;  // one sequence each, its newest position context - 1
  int64_t splits;
  int cta_heads;  // SetPagedAttentionCudaCtaHeads (0: the rule)
};

std::vector<uint8_t> Download(const void* ptr, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

void Upload(DeviceBuffer& dst, const void* src, size_t bytes) {
  ASSERT_TRUE(dst.ptr != nullptr);
  ASSERT_EQ(cudaMemcpy(dst.ptr, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
}

std::string Describe(const RopeAttentionCase& c, KvDtype dtype) {
  std::string s = "kv_heads " + std::to_string(c.kv_heads) + " group " + std::to_string(c.group) +
                  " n_rot " + std::to_string(c.n_rot) + " freq " + std::to_string(c.freq_factors) +
                  " window " + std::to_string(c.window) + " splits " + std::to_string(c.splits) +
                  " cta_heads " + std::to_string(c.cta_heads) + " dtype " +
                  std::to_string(static_cast<int>(dtype)) + " contexts";
  for (int64_t x : c.contexts) s += " " + std::to_string(x);
  return s;
}

void CheckCase(const RopeAttentionCase& c, KvDtype dtype) {
  SCOPED_TRACE(Describe(c, dtype));
  std::random_device rd;
  const uint32_t seed = rd();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto random = [&](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = scale * normal(rng);
    return v;
  };
  const int64_t heads = c.kv_heads * c.group, rows = static_cast<int64_t>(c.contexts.size());
  const int64_t q_stride = heads * kHeadDim + 4, kv_stride = c.kv_heads * kHeadDim + 8;
  // Pages: each sequence's in a shuffled order, one spare.
  int64_t num_blocks = 1;
  for (int64_t x : c.contexts) num_blocks += (x + kBlock - 1) / kBlock;
  std::vector<int32_t> pages(static_cast<size_t>(num_blocks));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<AttentionSeq> seqs;
  std::vector<int32_t> positions;
  std::vector<int64_t> slots;
  int64_t at = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ctx = c.contexts[r];
    AttentionSeq s;
    s.q_begin = r;
    s.q_count = 1;
    s.context_len = ctx;
    s.block_table = pages.data() + at;
    s.block_table_len = (ctx + kBlock - 1) / kBlock;
    seqs.push_back(s);
    const int32_t position = static_cast<int32_t>(ctx - 1);
    positions.push_back(position);
    slots.push_back(int64_t{s.block_table[position / kBlock]} * kBlock + position % kBlock);
    at += s.block_table_len;
  }
  // Caches: random older keys, the new rows' slots poisoned.
  const int64_t vector_bytes = KvVectorBytes(dtype, kHeadDim);
  const int64_t slot_bytes = c.kv_heads * vector_bytes;
  const size_t cache_bytes = static_cast<size_t>(num_blocks * kBlock * slot_bytes);
  std::vector<uint8_t> k_cache(cache_bytes), v_cache(cache_bytes);
  const int64_t elems = num_blocks * kBlock * c.kv_heads * kHeadDim;
  for (std::vector<uint8_t>* cache : {&k_cache, &v_cache}) {
    const std::vector<float> values = random(elems, 1.f);
    if (dtype == KvDtype::kF16) {
      for (int64_t i = 0; i < elems; ++i) {
        const __half h = __float2half_rn(values[i]);
        std::memcpy(cache->data() + 2 * i, &h, 2);
      }
    } else {
      std::memcpy(cache->data(), values.data(), cache_bytes);
    }
    for (int64_t slot : slots) {
      std::fill_n(cache->begin() + slot * slot_bytes, slot_bytes, uint8_t{0xA5});
    }
  }
  const std::vector<float> q = random(rows * q_stride, 2.f), k = random(rows * kv_stride, 2.f),
                           v = random(rows * kv_stride, 1.f), q_norm = random(kHeadDim, 1.f),
                           k_norm = random(kHeadDim, 1.f);
  std::vector<float> freq(static_cast<size_t>(c.n_rot / 2));
  for (float& f : freq) f = 1.f + std::abs(normal(rng));

  PagedAttentionArgs host;
  host.q = q.data();
  host.q_stride = q_stride;
  host.out_stride = heads * kHeadDim;
  host.positions = positions.data();
  host.seqs = seqs.data();
  host.n_seqs = rows;
  host.heads = heads;
  host.window = c.window;
  host.scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  host.kv = PagedKv{.k = k_cache.data(),
                    .v = v_cache.data(),
                    .dtype = dtype,
                    .num_blocks = num_blocks,
                    .block_size = kBlock,
                    .kv_heads = c.kv_heads,
                    .head_dim = kHeadDim};
  // The flattening reads only the batch; it checks that out is set, not where it points (the
  // device outputs are each run's own).
  float host_out_unused = 0.f;
  host.out = &host_out_unused;
  PagedAttentionCudaBatch batch;
  ASSERT_EQ(FlattenPagedAttentionBatch(host, &batch), KernelStatus::kOk);

  DeviceBuffer d_q(q.size() * 4), d_k(k.size() * 4), d_v(v.size() * 4), d_qn(kHeadDim * 4),
      d_kn(kHeadDim * 4), d_freq(std::max<size_t>(freq.size(), 1) * 4),
      d_positions(positions.size() * 4), d_slots(slots.size() * 8), d_words(batch.words.size() * 4);
  ASSERT_NO_FATAL_FAILURE(Upload(d_q, q.data(), q.size() * 4));
  ASSERT_NO_FATAL_FAILURE(Upload(d_k, k.data(), k.size() * 4));
  ASSERT_NO_FATAL_FAILURE(Upload(d_v, v.data(), v.size() * 4));
  ASSERT_NO_FATAL_FAILURE(Upload(d_qn, q_norm.data(), kHeadDim * 4));
  ASSERT_NO_FATAL_FAILURE(Upload(d_kn, k_norm.data(), kHeadDim * 4));
  ASSERT_NO_FATAL_FAILURE(Upload(d_freq, freq.data(), freq.size() * 4));
  ASSERT_NO_FATAL_FAILURE(Upload(d_positions, positions.data(), positions.size() * 4));
  ASSERT_NO_FATAL_FAILURE(Upload(d_slots, slots.data(), slots.size() * 8));
  ASSERT_NO_FATAL_FAILURE(Upload(d_words, batch.words.data(), batch.words.size() * 4));

  // One run's writable state: q and k (rotated in place by the two-kernel path), caches, output.
  struct Run {
    DeviceBuffer q, k, k_cache, v_cache, out, scratch;
    Run(size_t q_bytes, size_t k_bytes, size_t cache_bytes, size_t out_bytes, size_t scratch_bytes)
        : q(q_bytes),
          k(k_bytes),
          k_cache(cache_bytes),
          v_cache(cache_bytes),
          out(out_bytes),
          scratch(scratch_bytes) {}
  };
  const size_t out_bytes = static_cast<size_t>(rows * heads * kHeadDim * 4);
  const size_t scratch_bytes = static_cast<size_t>(
      std::max<int64_t>(PagedAttentionCudaScratchBytes(rows, heads, kHeadDim, c.splits), 16));
  Run two(q.size() * 4, k.size() * 4, cache_bytes, out_bytes, scratch_bytes);
  Run one(q.size() * 4, k.size() * 4, cache_bytes, out_bytes, scratch_bytes);
  for (Run* r : {&two, &one}) {
    ASSERT_NO_FATAL_FAILURE(Upload(r->q, q.data(), q.size() * 4));
    ASSERT_NO_FATAL_FAILURE(Upload(r->k, k.data(), k.size() * 4));
    ASSERT_NO_FATAL_FAILURE(Upload(r->k_cache, k_cache.data(), cache_bytes));
    ASSERT_NO_FATAL_FAILURE(Upload(r->v_cache, v_cache.data(), cache_bytes));
    ASSERT_EQ(cudaMemset(r->out.ptr, 0xFF, out_bytes), cudaSuccess);  // NaN
  }
  auto attention_args = [&](Run& r) {
    PagedAttentionCudaArgs a;
    a.q = static_cast<const float*>(r.q.ptr);
    a.q_stride = q_stride;
    a.out = static_cast<float*>(r.out.ptr);
    a.out_stride = heads * kHeadDim;
    a.rows = static_cast<const PagedAttentionCudaRow*>(d_words.ptr);
    a.n_rows = batch.n_rows;
    a.block_tables = static_cast<const int32_t*>(d_words.ptr) + batch.tables_offset;
    a.heads = heads;
    a.window = c.window;
    a.scale = host.scale;
    a.kv = host.kv;
    a.kv.k = r.k_cache.ptr;
    a.kv.v = r.v_cache.ptr;
    a.splits = c.splits;
    a.scratch = r.scratch.ptr;
    a.scratch_bytes = static_cast<int64_t>(scratch_bytes);
    a.sm_count = 132;
    return a;
  };
  // The two kernels.
  QkNormRopeCudaArgs rope;
  rope.q = static_cast<float*>(two.q.ptr);
  rope.q_stride = q_stride;
  rope.q_heads = heads;
  rope.q_norm = static_cast<const float*>(d_qn.ptr);
  rope.k = static_cast<float*>(two.k.ptr);
  rope.k_stride = kv_stride;
  rope.k_heads = c.kv_heads;
  rope.k_norm = static_cast<const float*>(d_kn.ptr);
  rope.tokens = rows;
  rope.head_dim = kHeadDim;
  rope.eps = 1e-5f;
  rope.positions = static_cast<const int32_t*>(d_positions.ptr);
  rope.n_rot = c.n_rot;
  rope.base = 10000.f;
  rope.freq_factors = c.freq_factors ? static_cast<const float*>(d_freq.ptr) : nullptr;
  KvAppendArgs append;
  append.k = rope.k;
  append.k_stride = kv_stride;
  append.v = static_cast<const float*>(d_v.ptr);
  append.v_stride = kv_stride;
  append.tokens = rows;
  append.slots = static_cast<const int64_t*>(d_slots.ptr);
  append.kv = host.kv;
  append.kv.k = two.k_cache.ptr;
  append.kv.v = two.v_cache.ptr;
  const int previous_heads = SetPagedAttentionCudaCtaHeads(c.cta_heads);
  ASSERT_EQ(QkNormRopeAppendCuda(rope, append, nullptr), KernelStatus::kOk);
  ASSERT_EQ(PagedAttentionCuda(attention_args(two), nullptr), KernelStatus::kOk);
  // The attention's own.
  PagedAttentionCudaRope own;
  own.k = static_cast<const float*>(one.k.ptr);
  own.k_stride = kv_stride;
  own.v = append.v;
  own.v_stride = kv_stride;
  own.q_norm = rope.q_norm;
  own.k_norm = rope.k_norm;
  own.freq_factors = rope.freq_factors;
  own.eps = rope.eps;
  own.n_rot = c.n_rot;
  own.base = rope.base;
  PagedAttentionCudaArgs a = attention_args(one);
  a.rope = &own;
  ASSERT_TRUE(PagedAttentionCudaRopeApplies(a));
  ASSERT_EQ(PagedAttentionCuda(a, nullptr), KernelStatus::kOk);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  SetPagedAttentionCudaCtaHeads(previous_heads);

  const std::vector<uint8_t> out_two = Download(two.out.ptr, out_bytes);
  const std::vector<uint8_t> out_one = Download(one.out.ptr, out_bytes);
  EXPECT_EQ(out_two, out_one) << "attention output";
  std::vector<float> values(out_one.size() / 4);
  std::memcpy(values.data(), out_one.data(), out_one.size());
  EXPECT_TRUE(std::all_of(values.begin(), values.end(), [](float x) { return std::isfinite(x); }))
      << "an output left poisoned";
  const std::vector<uint8_t> k_two = Download(two.k_cache.ptr, cache_bytes);
  EXPECT_EQ(k_two, Download(one.k_cache.ptr, cache_bytes)) << "K cache";
  EXPECT_EQ(Download(two.v_cache.ptr, cache_bytes), Download(one.v_cache.ptr, cache_bytes))
      << "V cache";
  // Not two untouched caches: the new slots were written.
  for (int64_t slot : slots) {
    EXPECT_FALSE(std::all_of(k_two.begin() + slot * slot_bytes,
                             k_two.begin() + (slot + 1) * slot_bytes,
                             [](uint8_t b) { return b == 0xA5; }))
        << "slot " << slot;
  }
  // The attention's own path leaves k as it was (not rotated in place).
  EXPECT_EQ(Download(one.k.ptr, k.size() * 4),
            std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(k.data()),
                                 reinterpret_cast<const uint8_t*>(k.data()) + k.size() * 4));
}

TEST(AttentionRopeCudaTest, EqualsRopeAppendThenAttentionBitForBit) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const RopeAttentionCase cases[] = {
      // Step-3.5-Flash at batch 1: full layers (groups of 8: CTAs of 4), 256 keys in 8 splits.
      {8, 8, 128, false, 0, {256}, 8, 0},
      // Sliding-window layers (groups of 12, partial rotation), the window inside the context.
      {8, 12, 64, true, 512, {700}, 8, 0},
      // The first key of a sequence; a new key in a split's later chunk; three sequences.
      {2, 8, 128, false, 0, {1}, 1, 4},
      {2, 8, 128, true, 0, {100}, 1, 8},
      {2, 12, 64, false, 37, {5, 300, 65}, 4, 8},
      {1, 16, 128, false, 0, {33, 64, 200}, 2, 16},
      {2, 20, 96, true, 0, {129}, 3, 0},  // two passes of heads: pass 1 does not write
  };
  for (const RopeAttentionCase& c : cases) {
    for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kF16}) {
      CheckCase(c, dtype);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(AttentionRopeCudaTest, AppliesOnlyWhereTheKernelTakesIt) {
  std::vector<float> host(64);
  PagedAttentionCudaRope rope;
  rope.k = host.data();
  rope.k_stride = 256;
  rope.v = host.data();
  rope.v_stride = 256;
  rope.q_norm = host.data();
  rope.k_norm = host.data();
  rope.n_rot = 64;
  PagedAttentionCudaArgs a;
  a.kv = PagedKv{.k = host.data(),
                 .v = host.data(),
                 .dtype = KvDtype::kF32,
                 .num_blocks = 1,
                 .block_size = 16,
                 .kv_heads = 2,
                 .head_dim = 128};
  a.rope = &rope;
  EXPECT_TRUE(PagedAttentionCudaRopeApplies(a));
  PagedAttentionCudaArgs other = a;
  other.kv.dtype = KvDtype::kQ8_0;
  EXPECT_FALSE(PagedAttentionCudaRopeApplies(other));
  other = a;
  other.kv.head_dim = 64;
  EXPECT_FALSE(PagedAttentionCudaRopeApplies(other));
  PagedAttentionCudaRope bad = rope;
  bad.n_rot = 3;
  other = a;
  other.rope = &bad;
  EXPECT_FALSE(PagedAttentionCudaRopeApplies(other));
  bad = rope;
  bad.k_stride = 255;  // shorter than the cache's 2 x 128 values
  EXPECT_FALSE(PagedAttentionCudaRopeApplies(other));
  other.rope = nullptr;
  EXPECT_FALSE(PagedAttentionCudaRopeApplies(other));
}

}  // namespace
}  // namespace stepserve::kernels
