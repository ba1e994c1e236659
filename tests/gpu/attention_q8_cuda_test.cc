// The Q8_0 KV-cache kernels on CUDA against the host references, on fresh random data (part of
// the attention_cuda_test binary; the backend-level Q8_0 scenarios are in attention_cuda_test.cc).
//
// - KvAppendCuda into Q8_0 pages against KvAppendRef (engine/quant's QuantizeRow): the bytes must
//   be equal. The kernel performs the CPU quantizer's operations in the same order (IEEE division,
//   F16 rounding of the scale, division by the rounded scale, round half to even, clamp), so
//   nothing is allowed to differ - not even by one step of a quant or one ulp of a scale. Blocks of
//   widely different magnitudes, exact .5 ties, zeros, F16-subnormal and zero scales, NaN, inf and
//   scale-overflowing elements, strided rows, skipped (-1) slots into a poisoned cache.
// - PagedAttentionCuda over Q8_0 pages against PagedAttentionRef on the same bytes: head dims 128
//   and 192, GQA groups 4, 8, 12 and 20 (two head passes), full and sliding-window attention (freed
//   pages -1), decode rows and prefill chunks with contexts across page boundaries, contexts up to
//   5000 (split-K), split counts 1, the automatic one, 3 and 32, strided Q / out poisoned with NaN
//   (the padding columns must stay NaN); each split count fused twice and through the combine
//   kernel, bitwise equal (attention_cuda_test_util.h). Pages no row may read (spare, freed, and
//   the slots past each context) hold 0xFF bytes, a NaN scale. Both sides read the same dequantized
//   values (the F32 product scale * q), so ||out - ref|| / ||ref|| <= 1e-4 bounds F32 accumulation
//   order only; an indexing, masking or scale error gives errors of order 1 (or NaN).
// - Host-side argument checks for Q8_0 (no device needed).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "engine/quant/float16.h"
#include "gtest/gtest.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "tests/gpu/attention_cuda_test_util.h"
#include "tests/gpu/backend_test_util.h"

namespace stepserve {
namespace {

using gpu_testing::CudaBackendOrNull;
using gpu_testing::kNoDeviceMessage;
using gpu_testing::RelError;
using gpu_testing::UploadBytes;
using kernels::KernelStatus;
using kernels::kKvQ8BlockBytes;
using kernels::kKvQ8BlockElems;

constexpr double kMaxRelError = 1e-4;

// Rows of `width` values (a multiple of 32) at `stride`; each 32-value block has its own
// magnitude 10^U(lo, hi), so scales cover a wide range.
std::vector<float> BlockRandomRows(int64_t rows, int64_t width, int64_t stride, float lo, float hi,
                                   std::mt19937& rng) {
  std::uniform_real_distribution<float> exponent(lo, hi), unit(-1.0f, 1.0f);
  std::vector<float> out(static_cast<size_t>(rows * stride), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < width / kKvQ8BlockElems; ++b) {
      const float mag = std::pow(10.0f, exponent(rng));
      for (int64_t j = 0; j < kKvQ8BlockElems; ++j) {
        out[r * stride + b * kKvQ8BlockElems + j] = mag * unit(rng);
      }
    }
  }
  return out;
}

// Device copy of a host byte array, made on the backend's stream and waited for, so kernels
// launched on the legacy default stream below see it.
BackendBuffer ToDevice(Backend& cuda, const void* host, size_t bytes) {
  BackendBuffer buffer = UploadBytes(cuda, host, bytes);
  EXPECT_TRUE(cuda.Synchronize().ok());
  return buffer;
}

std::vector<uint8_t> FromDevice(const void* device, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// Names the first differing Q8_0 block of two caches (empty when equal).
std::string FirstBlockDifference(const std::vector<uint8_t>& got,
                                 const std::vector<uint8_t>& want) {
  for (size_t at = 0; at + kKvQ8BlockBytes <= want.size(); at += kKvQ8BlockBytes) {
    if (std::memcmp(got.data() + at, want.data() + at, kKvQ8BlockBytes) == 0) continue;
    uint16_t got_d, want_d;
    std::memcpy(&got_d, got.data() + at, 2);
    std::memcpy(&want_d, want.data() + at, 2);
    std::string text =
        absl::StrFormat("block %d: scale %a (gpu) vs %a (cpu); q:", at / kKvQ8BlockBytes,
                        F16ToF32(got_d), F16ToF32(want_d));
    for (int64_t j = 0; j < kKvQ8BlockElems; ++j) {
      const int g = static_cast<int8_t>(got[at + 2 + j]), w = static_cast<int8_t>(want[at + 2 + j]);
      if (g != w) text += absl::StrFormat(" [%d] %d vs %d", j, g, w);
    }
    return text;
  }
  return "";
}

// ---- KV append ----

void CheckAppend(Backend& cuda, int64_t head_dim, int64_t kv_heads, uint32_t seed) {
  SCOPED_TRACE(absl::StrFormat("head_dim %d kv_heads %d", head_dim, kv_heads));
  std::mt19937 rng(seed);
  const int64_t block_size = 16, num_blocks = 6, tokens = 50;
  const int64_t width = kv_heads * head_dim, stride = width + 8;
  std::vector<float> k = BlockRandomRows(tokens, width, stride, -5.0f, 3.0f, rng);
  std::vector<float> v = BlockRandomRows(tokens, width, stride, -2.0f, 1.0f, rng);
  // Edge blocks in the first two blocks of K rows 0-3 (every width holds two): see the file
  // comment.
  const auto block = [&](int64_t row, int64_t b) { return k.data() + row * stride + b * 32; };
  std::fill(block(0, 0), block(0, 0) + 32, 0.0f);                               // zero scale
  for (int j = 0; j < 32; ++j) block(0, 1)[j] = static_cast<float>(j) - 15.5f;  // d = 1: ties
  block(0, 1)[0] = 127.0f;
  for (int j = 0; j < 32; ++j) {
    block(1, 0)[j] = 1e-4f * (j % 2 ? -1.0f : 1.0f) * j / 31.0f;  // F16-subnormal scale
    block(1, 1)[j] = 3e-6f * j / 31.0f;                           // scale rounds to 0
  }
  block(2, 0)[5] = std::numeric_limits<float>::quiet_NaN();
  block(2, 1)[7] = -std::numeric_limits<float>::infinity();
  block(3, 0)[9] = 1e7f;                // amax / 127 overflows F16: an infinite scale
  block(3, 1)[11] = 65504.0f * 127.0f;  // exactly the largest F16 scale
  // Distinct slots in shuffled order; every fourth token after the edge rows is skipped.
  std::vector<int64_t> slots(static_cast<size_t>(num_blocks * block_size));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(tokens);
  for (int64_t t = 5; t < tokens; t += 4) slots[t] = -1;

  const int64_t vec_bytes = kernels::KvVectorBytes(KvDtype::kQ8_0, head_dim);
  const size_t cache_bytes = static_cast<size_t>(num_blocks * block_size * kv_heads * vec_bytes);
  std::vector<uint8_t> want_k(cache_bytes, 0xFF), want_v(cache_bytes, 0xFF);
  kernels::KvAppendArgs a;
  a.k = k.data();
  a.k_stride = stride;
  a.v = v.data();
  a.v_stride = stride;
  a.tokens = tokens;
  a.slots = slots.data();
  a.kv = {want_k.data(), want_v.data(), KvDtype::kQ8_0, num_blocks, block_size, kv_heads, head_dim};
  ASSERT_EQ(kernels::KvAppendRef(a), KernelStatus::kOk);

  BackendBuffer dk = ToDevice(cuda, k.data(), k.size() * 4);
  BackendBuffer dv = ToDevice(cuda, v.data(), v.size() * 4);
  BackendBuffer dslots = ToDevice(cuda, slots.data(), slots.size() * 8);
  const std::vector<uint8_t> poison(cache_bytes, 0xFF);
  BackendBuffer dcache_k = ToDevice(cuda, poison.data(), cache_bytes);
  BackendBuffer dcache_v = ToDevice(cuda, poison.data(), cache_bytes);
  kernels::KvAppendArgs d = a;
  d.k = static_cast<const float*>(dk.data());
  d.v = static_cast<const float*>(dv.data());
  d.slots = static_cast<const int64_t*>(dslots.data());
  d.kv.k = dcache_k.data();
  d.kv.v = dcache_v.data();
  ASSERT_EQ(kernels::KvAppendCuda(d, nullptr), KernelStatus::kOk);
  const std::vector<uint8_t> got_k = FromDevice(dcache_k.data(), cache_bytes);
  const std::vector<uint8_t> got_v = FromDevice(dcache_v.data(), cache_bytes);
  EXPECT_TRUE(got_k == want_k) << "K: " << FirstBlockDifference(got_k, want_k);
  EXPECT_TRUE(got_v == want_v) << "V: " << FirstBlockDifference(got_v, want_v);
}

TEST(KvAppendQ8CudaTest, BytesEqualCpuQuantizer) {
  std::unique_ptr<Backend> cuda = CudaBackendOrNull();
  if (!cuda) GTEST_SKIP() << kNoDeviceMessage;
  uint32_t seed = 1;
  for (int64_t head_dim : {128, 192, 64}) {
    for (int64_t kv_heads : {1, 2, 8}) CheckAppend(*cuda, head_dim, kv_heads, seed++);
  }
}

// ---- Attention ----

struct Q8Case {
  int64_t head_dim = 128;
  int64_t kv_heads = 2;
  int64_t group = 4;
  int64_t block_size = 16;
  int64_t window = 0;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (context, query rows: the last positions)
  int64_t q_pad = 0;                              // extra floats per Q / out row
};

void CheckAttention(Backend& cuda, const Q8Case& c, uint32_t seed) {
  SCOPED_TRACE(absl::StrFormat("head_dim %d kv_heads %d group %d block %d window %d", c.head_dim,
                               c.kv_heads, c.group, c.block_size, c.window));
  std::mt19937 rng(seed);
  const int64_t bs = c.block_size, heads = c.kv_heads * c.group;
  // Pages of every sequence shuffled over the cache, plus two spare ones.
  int64_t num_blocks = 2;
  for (const auto& seq : c.seqs) num_blocks += (seq.first + bs - 1) / bs;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);

  // Every slot quantized from random rows, then the unreadable ones poisoned.
  const int64_t width_kv = c.kv_heads * c.head_dim;
  const int64_t slot_bytes = c.kv_heads * kernels::KvVectorBytes(KvDtype::kQ8_0, c.head_dim);
  const int64_t total_slots = num_blocks * bs;
  std::vector<float> k = BlockRandomRows(total_slots, width_kv, width_kv, -1.0f, 0.5f, rng);
  std::vector<float> v = BlockRandomRows(total_slots, width_kv, width_kv, -1.0f, 0.5f, rng);
  std::vector<int64_t> all_slots(total_slots);
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::vector<uint8_t> cache_k(static_cast<size_t>(total_slots * slot_bytes));
  std::vector<uint8_t> cache_v(cache_k.size());
  kernels::KvAppendArgs fill;
  fill.k = k.data();
  fill.k_stride = width_kv;
  fill.v = v.data();
  fill.v_stride = width_kv;
  fill.tokens = total_slots;
  fill.slots = all_slots.data();
  fill.kv = {cache_k.data(), cache_v.data(), KvDtype::kQ8_0, num_blocks, bs,
             c.kv_heads,     c.head_dim};
  ASSERT_EQ(kernels::KvAppendRef(fill), KernelStatus::kOk);
  std::vector<bool> readable(total_slots, false);

  std::vector<std::vector<int32_t>> tables;
  std::vector<kernels::AttentionSeq> seqs;
  std::vector<int32_t> positions;
  int64_t next_page = 0;
  for (const auto& [context, q_count] : c.seqs) {
    const int64_t pages = (context + bs - 1) / bs;
    std::vector<int32_t> table(ids.begin() + next_page, ids.begin() + next_page + pages);
    next_page += pages;
    const int64_t first_q = context - q_count;
    const int64_t earliest = c.window > 0 ? std::max<int64_t>(0, first_q - c.window + 1) : 0;
    for (int64_t p = 0; p < context; ++p) {
      if (p >= earliest) readable[table[p / bs] * bs + p % bs] = true;
    }
    for (int64_t page = 0; (page + 1) * bs <= earliest; ++page) table[page] = -1;  // freed
    kernels::AttentionSeq s;
    s.q_begin = static_cast<int64_t>(positions.size());
    s.q_count = q_count;
    s.context_len = context;
    s.block_table_len = pages;
    for (int64_t p = first_q; p < context; ++p) positions.push_back(static_cast<int32_t>(p));
    tables.push_back(std::move(table));
    seqs.push_back(s);
  }
  for (size_t s = 0; s < seqs.size(); ++s) seqs[s].block_table = tables[s].data();
  for (int64_t slot = 0; slot < total_slots; ++slot) {
    if (readable[slot]) continue;
    std::memset(cache_k.data() + slot * slot_bytes, 0xFF, slot_bytes);
    std::memset(cache_v.data() + slot * slot_bytes, 0xFF, slot_bytes);
  }

  const int64_t rows = static_cast<int64_t>(positions.size());
  const int64_t width = heads * c.head_dim, stride = width + c.q_pad;
  std::uniform_real_distribution<float> unit(-3.0f, 3.0f);
  std::vector<float> q(static_cast<size_t>(rows * stride));
  for (float& x : q) x = unit(rng);
  std::vector<float> want(q.size(), 0.0f);
  kernels::PagedAttentionArgs host;
  host.q = q.data();
  host.q_stride = stride;
  host.out = want.data();
  host.out_stride = stride;
  host.positions = positions.data();
  host.seqs = seqs.data();
  host.n_seqs = static_cast<int64_t>(seqs.size());
  host.heads = heads;
  host.window = c.window;
  host.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  host.kv = fill.kv;
  ASSERT_EQ(kernels::PagedAttentionRef(host), KernelStatus::kOk);
  kernels::PagedAttentionCudaBatch batch;
  ASSERT_EQ(kernels::FlattenPagedAttentionBatch(host, &batch), KernelStatus::kOk);

  BackendBuffer dk = ToDevice(cuda, cache_k.data(), cache_k.size());
  BackendBuffer dv = ToDevice(cuda, cache_v.data(), cache_v.size());
  BackendBuffer dq = ToDevice(cuda, q.data(), q.size() * 4);
  BackendBuffer dout = ToDevice(cuda, q.data(), q.size() * 4);
  BackendBuffer dwords = ToDevice(cuda, batch.words.data(), batch.words.size() * 4);
  int sm_count = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int64_t automatic = kernels::PagedAttentionCudaSplits(batch.n_rows, heads, c.kv_heads,
                                                              batch.max_visible, sm_count);
  for (int64_t splits : {int64_t{1}, automatic, int64_t{3}, int64_t{32}}) {
    SCOPED_TRACE(absl::StrFormat("splits %d (automatic %d)", splits, automatic));
    kernels::PagedAttentionCudaArgs a;
    a.q = static_cast<const float*>(dq.data());
    a.q_stride = stride;
    a.out = static_cast<float*>(dout.data());
    a.out_stride = stride;
    a.rows = static_cast<const kernels::PagedAttentionCudaRow*>(dwords.data());
    a.n_rows = batch.n_rows;
    a.block_tables = static_cast<const int32_t*>(dwords.data()) + batch.tables_offset;
    a.heads = heads;
    a.window = c.window;
    a.scale = host.scale;
    a.kv = host.kv;
    a.kv.k = dk.data();
    a.kv.v = dv.data();
    a.splits = splits;
    a.scratch_bytes = kernels::PagedAttentionCudaScratchBytes(rows, heads, c.head_dim, splits);
    absl::StatusOr<BackendBuffer> scratch = cuda.Allocate(std::max<int64_t>(a.scratch_bytes, 1));
    ASSERT_TRUE(scratch.ok());
    a.scratch = scratch->data();
    // NaN-poisoned output; fused combine twice, then the combine kernel, bitwise equal.
    const std::vector<float> got_padded = gpu_testing::RunFusedAndCombineKernel(a, q.size());
    ASSERT_EQ(got_padded.size(), q.size());
    std::vector<float> got, ref;
    bool pad_untouched = true;
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = got_padded.begin() + r * stride;
      got.insert(got.end(), row, row + width);
      ref.insert(ref.end(), want.begin() + r * stride, want.begin() + r * stride + width);
      pad_untouched = pad_untouched &&
                      std::all_of(row + width, row + stride, [](float x) { return std::isnan(x); });
    }
    EXPECT_LE(RelError(got, ref), kMaxRelError);
    EXPECT_TRUE(pad_untouched) << "a column past the row width was written";
  }
}

class PagedAttentionQ8CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cuda_ = CudaBackendOrNull();
    if (!cuda_) GTEST_SKIP() << kNoDeviceMessage;
  }
  std::unique_ptr<Backend> cuda_;
};

// Decode rows and prefill chunks; contexts on both sides of page boundaries (16 and 32).
std::vector<std::pair<int64_t, int64_t>> RaggedSeqs() {
  return {{1, 1}, {15, 1}, {16, 1}, {17, 1}, {33, 1}, {100, 20}, {64, 64}, {129, 7}, {250, 1}};
}

TEST_F(PagedAttentionQ8CudaTest, FullAttentionMatchesReference) {
  CheckAttention(*cuda_, {.head_dim = 128, .kv_heads = 2, .group = 4, .seqs = RaggedSeqs()}, 1);
  CheckAttention(*cuda_,
                 {.head_dim = 192,
                  .kv_heads = 1,
                  .group = 12,
                  .block_size = 32,
                  .seqs = RaggedSeqs(),
                  .q_pad = 8},
                 2);
  CheckAttention(*cuda_, {.head_dim = 128, .kv_heads = 1, .group = 20, .seqs = RaggedSeqs()}, 3);
}

// W = 128 with freed pages before every row's window; prefill rows straddling it.
TEST_F(PagedAttentionQ8CudaTest, SlidingWindowMatchesReference) {
  const std::vector<std::pair<int64_t, int64_t>> seqs = {{1, 1},   {127, 1},  {128, 1},  {129, 1},
                                                         {300, 1}, {600, 40}, {200, 200}};
  CheckAttention(*cuda_, {.head_dim = 128, .kv_heads = 1, .group = 20, .window = 128, .seqs = seqs},
                 10);
  CheckAttention(*cuda_,
                 {.head_dim = 192,
                  .kv_heads = 2,
                  .group = 4,
                  .block_size = 32,
                  .window = 128,
                  .seqs = seqs,
                  .q_pad = 4},
                 11);
}

// Few rows over long contexts: the automatic split count is > 1 here.
TEST_F(PagedAttentionQ8CudaTest, LongContextMatchesReference) {
  const std::vector<std::pair<int64_t, int64_t>> seqs = {{5000, 1}, {4097, 1}, {300, 1}};
  CheckAttention(*cuda_,
                 {.head_dim = 128, .kv_heads = 2, .group = 8, .block_size = 32, .seqs = seqs}, 20);
  CheckAttention(
      *cuda_,
      {.head_dim = 192, .kv_heads = 1, .group = 12, .block_size = 16, .window = 1000, .seqs = seqs},
      21);
}

// ---- Host side (runs without a device). ----

TEST(PagedAttentionQ8CudaHostTest, RejectsBadQ8ArgumentsWithoutLaunching) {
  alignas(8) uint8_t dummy[8] = {};
  kernels::PagedAttentionCudaArgs a;
  a.q = reinterpret_cast<const float*>(dummy);
  a.out = reinterpret_cast<float*>(dummy);
  a.q_stride = a.out_stride = 4 * 64;
  a.heads = 4;
  a.scale = 0.125f;
  a.n_rows = 1;
  a.rows = reinterpret_cast<const kernels::PagedAttentionCudaRow*>(dummy);
  a.block_tables = reinterpret_cast<const int32_t*>(dummy);
  a.kv = {dummy, dummy, KvDtype::kQ8_0, 4, 16, 2, 48};  // 48: not whole Q8_0 blocks
  EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kInvalidArgument);
  a.kv.head_dim = 64;
  a.kv.k = dummy + 1;  // pages must be 2-byte aligned
  EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kInvalidArgument);
  a.kv.k = dummy;
  a.n_rows = 0;
  EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), KernelStatus::kOk);  // valid, nothing to do

  kernels::KvAppendArgs append;
  append.k = append.v = reinterpret_cast<const float*>(dummy);
  append.slots = reinterpret_cast<const int64_t*>(dummy);
  append.k_stride = append.v_stride = 2 * 48;
  append.kv = {dummy, dummy, KvDtype::kQ8_0, 4, 16, 2, 48};
  EXPECT_EQ(kernels::KvAppendCuda(append, nullptr), KernelStatus::kInvalidArgument);
  append.k_stride = append.v_stride = 2 * 64;
  append.kv.head_dim = 64;
  append.kv.v = dummy + 1;
  EXPECT_EQ(kernels::KvAppendCuda(append, nullptr), KernelStatus::kInvalidArgument);
  append.kv.v = dummy;
  EXPECT_EQ(kernels::KvAppendCuda(append, nullptr), KernelStatus::kOk);  // no tokens: no launch
}

}  // namespace
}  // namespace stepserve
