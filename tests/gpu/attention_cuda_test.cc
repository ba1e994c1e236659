// CUDA AppendKv / Attention against the CPU backend, and the CUDA paged-attention kernel against
// PagedAttentionRef with forced split counts, on fresh random data.
//
// Each scenario fills a paged cache (pages shuffled, poisoned with NaN bytes first so a read of an
// unwritten slot shows) through AppendKv on both backends and requires the caches to be equal
// byte for byte (F16: both round to nearest even; Q8_0: both quantize with the same operations),
// then runs Attention over a ragged batch of decode rows and prefill chunks with NaN-poisoned
// outputs. Sliding-window scenarios mark the pages no row can see as freed (-1). Bounds on
// ||out - ref|| / ||ref||: 1e-4 with an F32 or Q8_0 cache, 2e-3 with an F16 cache (both backends
// read the same values - Q8_0 dequantizes to the same F32 products - so the observed error is F32
// rounding either way; an indexing or masking error gives errors of order 1). The Q8_0 kernels
// against PagedAttentionRef / KvAppendRef, with forced split counts: attention_q8_cuda_test.cc.
//
// Split-K: the fused combine (the last CTA of each (row, KV head) combines), the same launch again
// (its arrival counters must be back at zero) and the combine kernel must give the same bytes
// (SplitKFusedCombineEqualsCombineKernel through the backend; ForcedSplitsMatchReference and the
// Q8_0 kernel test through attention_cuda_test_util.h, with the partials NaN-poisoned as well).
//
// The host-side parts (batch flattening, split and heads-per-CTA choice, argument checks):
// attention_cuda_host_test.cc.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "gtest/gtest.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "tests/gpu/attention_cuda_test_util.h"
#include "tests/gpu/backend_test_util.h"

namespace stepserve {
namespace {

using gpu_testing::AllocMat;
using gpu_testing::CudaBackendOrNull;
using gpu_testing::DeviceMat;
using gpu_testing::DownloadMat;
using gpu_testing::kNoDeviceMessage;
using gpu_testing::RandomVector;
using gpu_testing::RelError;
using gpu_testing::UploadBytes;
using gpu_testing::UploadMat;
using kernels::KernelStatus;

constexpr double kMaxRelErrorF32Cache = 1e-4;
constexpr double kMaxRelErrorF16Cache = 2e-3;
constexpr double kMaxRelErrorQ8Cache = 1e-4;

// The dtypes every backend-level scenario runs with (Q8_0 only where head_dim % 32 == 0).
constexpr KvDtype kCacheDtypes[] = {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0};

struct SeqSpec {
  int64_t context = 0;  // tokens cached after this step
  int64_t q_count = 0;  // query rows: the last q_count positions (1 = decode)
};

struct Scenario {
  std::string name;
  int64_t head_dim = 128;
  int64_t kv_heads = 2;
  int64_t group = 4;
  int64_t block_size = 16;
  int64_t window = 0;
  KvDtype dtype = KvDtype::kF32;
  std::vector<SeqSpec> seqs;
  int64_t q_pad = 0;  // extra floats per Q / out row (strided views)
  // Split-K steps: also run the step fused twice more and once through the combine kernel.
  bool compare_combine_paths = false;
  // Also run the step with 16, 4, 3 and 1 query heads per CTA (SetPagedAttentionCudaCtaHeads):
  // every head does the same arithmetic wherever it runs, so the same bytes.
  bool compare_cta_heads = false;
};

// A host batch description: positions, per-sequence slices and the block tables they point into.
struct HostBatch {
  std::vector<int32_t> positions;
  std::vector<std::vector<int32_t>> tables;
  std::vector<SequenceSlice> slices;
  AttentionBatch view() const { return {positions, slices}; }
};

// Pages of every sequence, shuffled over the cache.
std::vector<std::vector<int32_t>> AssignPages(const Scenario& sc, int64_t* num_blocks,
                                              std::mt19937& rng) {
  int64_t total = 0;
  for (const SeqSpec& s : sc.seqs) total += (s.context + sc.block_size - 1) / sc.block_size;
  *num_blocks = total + 3;  // a few pages no sequence owns
  std::vector<int32_t> ids(*num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables;
  int64_t next = 0;
  for (const SeqSpec& s : sc.seqs) {
    const int64_t pages = (s.context + sc.block_size - 1) / sc.block_size;
    tables.emplace_back(ids.begin() + next, ids.begin() + next + pages);
    next += pages;
  }
  return tables;
}

// Every cached position of every sequence as one append batch, plus one trailing row that belongs
// to no sequence (its slot is -1: nothing may be written for it).
HostBatch FullContextBatch(const Scenario& sc, const std::vector<std::vector<int32_t>>& tables) {
  HostBatch b;
  b.tables = tables;
  for (size_t s = 0; s < sc.seqs.size(); ++s) {
    SequenceSlice slice;
    slice.q_begin = static_cast<int64_t>(b.positions.size());
    slice.q_count = sc.seqs[s].context;
    slice.context_len = sc.seqs[s].context;
    for (int64_t p = 0; p < sc.seqs[s].context; ++p) b.positions.push_back(static_cast<int32_t>(p));
    b.slices.push_back(slice);
  }
  b.positions.push_back(0);
  for (size_t s = 0; s < b.slices.size(); ++s) b.slices[s].block_table = b.tables[s];
  return b;
}

// The query rows of the step; with a window, pages before every row's window are freed (-1).
HostBatch QueryBatch(const Scenario& sc, const std::vector<std::vector<int32_t>>& tables) {
  HostBatch b;
  b.tables = tables;
  for (size_t s = 0; s < sc.seqs.size(); ++s) {
    const SeqSpec& spec = sc.seqs[s];
    SequenceSlice slice;
    slice.q_begin = static_cast<int64_t>(b.positions.size());
    slice.q_count = spec.q_count;
    slice.context_len = spec.context;
    for (int64_t p = spec.context - spec.q_count; p < spec.context; ++p) {
      b.positions.push_back(static_cast<int32_t>(p));
    }
    if (sc.window > 0) {
      const int64_t earliest = std::max<int64_t>(0, spec.context - spec.q_count - sc.window + 1);
      for (int64_t page = 0; (page + 1) * sc.block_size <= earliest; ++page) b.tables[s][page] = -1;
    }
    b.slices.push_back(slice);
  }
  for (size_t s = 0; s < b.slices.size(); ++s) b.slices[s].block_table = b.tables[s];
  return b;
}

void RunScenario(Backend& cuda, Backend& cpu, const Scenario& sc, uint32_t seed) {
  SCOPED_TRACE(sc.name);
  std::mt19937 rng(seed);
  int64_t num_blocks = 0;
  const std::vector<std::vector<int32_t>> tables = AssignPages(sc, &num_blocks, rng);
  const int64_t width_kv = sc.kv_heads * sc.head_dim;
  const size_t cache_bytes = static_cast<size_t>(num_blocks * sc.block_size * sc.kv_heads *
                                                 kernels::KvVectorBytes(sc.dtype, sc.head_dim));

  // Caches poisoned with 0xFF bytes (NaN in F32 and F16, a NaN scale in Q8_0).
  std::vector<uint8_t> cpu_k(cache_bytes, 0xFF), cpu_v(cache_bytes, 0xFF);
  BackendBuffer dev_k = UploadBytes(cuda, cpu_k.data(), cache_bytes);
  BackendBuffer dev_v = UploadBytes(cuda, cpu_v.data(), cache_bytes);
  KvCacheView cpu_cache{cpu_k.data(),  cpu_v.data(), sc.dtype,   num_blocks,
                        sc.block_size, sc.kv_heads,  sc.head_dim};
  KvCacheView dev_cache = cpu_cache;
  dev_cache.k = dev_k.data();
  dev_cache.v = dev_v.data();

  // Append the whole context.
  const HostBatch fill = FullContextBatch(sc, tables);
  const int64_t fill_rows = static_cast<int64_t>(fill.positions.size());
  std::vector<float> k = RandomVector(fill_rows * width_kv, 1.0f, rng);
  std::vector<float> v = RandomVector(fill_rows * width_kv, 1.0f, rng);
  ASSERT_TRUE(cpu.AppendKv(TensorView::F32(k.data(), width_kv, fill_rows),
                           TensorView::F32(v.data(), width_kv, fill_rows), fill.view(), cpu_cache)
                  .ok());
  DeviceMat dk = UploadMat(cuda, k, width_kv, fill_rows);
  DeviceMat dv = UploadMat(cuda, v, width_kv, fill_rows);
  absl::Status st = cuda.AppendKv(dk.view, dv.view, fill.view(), dev_cache);
  ASSERT_TRUE(st.ok()) << st;
  std::vector<uint8_t> got_k(cache_bytes), got_v(cache_bytes);
  ASSERT_TRUE(cuda.Download(dev_k.data(), got_k.data(), cache_bytes).ok());
  ASSERT_TRUE(cuda.Download(dev_v.data(), got_v.data(), cache_bytes).ok());
  EXPECT_TRUE(got_k == cpu_k) << "K cache differs from the CPU backend's";
  EXPECT_TRUE(got_v == cpu_v) << "V cache differs from the CPU backend's";

  // Attention over the step's rows.
  const HostBatch query = QueryBatch(sc, tables);
  const int64_t rows = static_cast<int64_t>(query.positions.size());
  const int64_t width = sc.kv_heads * sc.group * sc.head_dim;
  const int64_t stride = width + sc.q_pad;
  std::vector<float> q = RandomVector(rows * stride, 3.0f, rng);
  std::vector<float> want(rows * stride, 0.0f);
  const AttentionParams params{.window = sc.window,
                               .scale = 1.0f / std::sqrt(static_cast<float>(sc.head_dim))};
  st = cpu.Attention(TensorView::F32(q.data(), width, rows, stride), query.view(), cpu_cache,
                     params, TensorView::F32(want.data(), width, rows, stride));
  ASSERT_TRUE(st.ok()) << st;
  DeviceMat dq = UploadMat(cuda, q, stride, rows);
  DeviceMat dout = gpu_testing::PoisonedMat(cuda, stride, rows);
  st = cuda.Attention(TensorView::F32(dq.view.f32(), width, rows, stride), query.view(), dev_cache,
                      params, TensorView::F32(dout.view.f32(), width, rows, stride));
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<float> got_padded = DownloadMat(cuda, dout);
  std::vector<float> got, ref;
  for (int64_t r = 0; r < rows; ++r) {
    got.insert(got.end(), got_padded.begin() + r * stride, got_padded.begin() + r * stride + width);
    ref.insert(ref.end(), want.begin() + r * stride, want.begin() + r * stride + width);
  }
  const double bound = gpu_testing::MmaDecodeTakes(sc.dtype, sc.head_dim, sc.group)
                           ? gpu_testing::kMaxRelErrorMmaDecode
                       : sc.dtype == KvDtype::kF16  ? kMaxRelErrorF16Cache
                       : sc.dtype == KvDtype::kQ8_0 ? kMaxRelErrorQ8Cache
                                                    : kMaxRelErrorF32Cache;
  EXPECT_LE(RelError(got, ref), bound);
  for (int heads : {16, 4, 3, 1}) {
    if (!sc.compare_cta_heads) break;
    SCOPED_TRACE(absl::StrFormat("again, %d heads per CTA", heads));
    gpu_testing::CtaHeadsScope scope(heads);
    DeviceMat again = gpu_testing::PoisonedMat(cuda, stride, rows);
    st = cuda.Attention(TensorView::F32(dq.view.f32(), width, rows, stride), query.view(),
                        dev_cache, params, TensorView::F32(again.view.f32(), width, rows, stride));
    ASSERT_TRUE(st.ok()) << st;
    const std::vector<float> again_padded = DownloadMat(cuda, again);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(std::memcmp(again_padded.data() + r * stride, got.data() + r * width,
                            width * sizeof(float)),
                0)
          << "row " << r;
    }
  }
  if (!sc.compare_combine_paths) return;

  // The step again: fused twice in a row (the backend's arrival counters must be back at zero
  // after each launch), then through the combine kernel - every output bitwise equal to `got`.
  for (int run = 0; run < 3; ++run) {
    const bool fused = run < 2;
    SCOPED_TRACE(absl::StrFormat("again, %s", fused ? "fused combine" : "combine kernel"));
    gpu_testing::FusedCombineScope scope(fused);
    const int64_t combines = kernels::PagedAttentionCudaCombineLaunches();
    DeviceMat again = gpu_testing::PoisonedMat(cuda, stride, rows);
    st = cuda.Attention(TensorView::F32(dq.view.f32(), width, rows, stride), query.view(),
                        dev_cache, params, TensorView::F32(again.view.f32(), width, rows, stride));
    ASSERT_TRUE(st.ok()) << st;
    const std::vector<float> again_padded = DownloadMat(cuda, again);
    // Every scenario that asks for this splits (few rows, long contexts): one combine launch
    // without the fusion, none with it.
    EXPECT_EQ(kernels::PagedAttentionCudaCombineLaunches() - combines, fused ? 0 : 1);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(std::memcmp(again_padded.data() + r * stride, got.data() + r * width,
                            width * sizeof(float)),
                0)
          << "row " << r;
    }
  }
}

class AttentionCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cuda_ = CudaBackendOrNull();
    if (!cuda_) GTEST_SKIP() << kNoDeviceMessage;
    absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu", {.num_threads = 4});
    ASSERT_TRUE(cpu.ok());
    cpu_ = *std::move(cpu);
  }
  std::unique_ptr<Backend> cuda_;
  std::unique_ptr<Backend> cpu_;
};

// Decode rows and prefill chunks in one batch, contexts across page boundaries.
std::vector<SeqSpec> RaggedSeqs() {
  return {{1, 1}, {37, 1}, {100, 20}, {16, 16}, {33, 1}, {64, 1}, {129, 7}, {250, 1}};
}

TEST_F(AttentionCudaTest, RaggedBatchMatchesCpu) {
  uint32_t seed = 1;
  for (KvDtype dtype : kCacheDtypes) {
    for (int64_t head_dim : {64, 128, 192}) {
      for (int64_t group : {4, 8}) {
        for (int64_t block_size : {16, 32}) {
          Scenario sc;
          sc.name = absl::StrFormat("dtype %d dh %d group %d block %d", static_cast<int>(dtype),
                                    head_dim, group, block_size);
          sc.dtype = dtype;
          sc.head_dim = head_dim;
          sc.group = group;
          sc.block_size = block_size;
          sc.seqs = RaggedSeqs();
          RunScenario(*cuda_, *cpu_, sc, seed++);
        }
      }
    }
  }
}

// Head dims off the vector path (tiny preset: 32; 36 and 30 are not multiples of 8 / 4), GQA
// groups 1, 3 (tiny), 12 (step-3.5-flash), 16 and 20 (two head passes), strided Q / out.
TEST_F(AttentionCudaTest, OddShapesMatchCpu) {
  uint32_t seed = 100;
  for (KvDtype dtype : kCacheDtypes) {
    for (int64_t head_dim : {32, 36, 30, 256}) {
      if (kernels::KvVectorBytes(dtype, head_dim) == 0) continue;  // Q8_0: whole blocks only
      for (int64_t group : {1, 3, 12, 20}) {
        Scenario sc;
        sc.name =
            absl::StrFormat("dtype %d dh %d group %d", static_cast<int>(dtype), head_dim, group);
        sc.dtype = dtype;
        sc.head_dim = head_dim;
        sc.group = group;
        sc.kv_heads = group == 20 ? 1 : 2;
        sc.block_size = 16;
        sc.window = group == 3 ? 16 : 0;
        sc.q_pad = 8;
        sc.seqs = {{5, 5}, {40, 1}, {71, 3}};
        RunScenario(*cuda_, *cpu_, sc, seed++);
      }
    }
  }
}

// W = 128: contexts 1..600 straddling the window, freed pages before it.
TEST_F(AttentionCudaTest, SlidingWindowMatchesCpu) {
  uint32_t seed = 200;
  for (KvDtype dtype : kCacheDtypes) {
    for (int64_t block_size : {16, 32}) {
      Scenario sc;
      sc.name = absl::StrFormat("dtype %d block %d", static_cast<int>(dtype), block_size);
      sc.dtype = dtype;
      sc.head_dim = 128;
      sc.group = 8;
      sc.kv_heads = 2;
      sc.block_size = block_size;
      sc.window = 128;
      sc.seqs = {{1, 1},   {2, 1},   {17, 1},  {127, 1},  {128, 1},  {129, 1},
                 {255, 1}, {300, 1}, {600, 1}, {600, 40}, {200, 200}};
      RunScenario(*cuda_, *cpu_, sc, seed++);
    }
  }
}

// Context 5000 with few rows: the split-K path (and a window wide enough to split too).
TEST_F(AttentionCudaTest, LongContextSplitKMatchesCpu) {
  uint32_t seed = 300;
  for (KvDtype dtype : kCacheDtypes) {
    for (int64_t window : {0, 1000, 128}) {
      Scenario sc;
      sc.name = absl::StrFormat("dtype %d window %d", static_cast<int>(dtype), window);
      sc.dtype = dtype;
      sc.head_dim = 128;
      sc.group = 8;
      sc.kv_heads = 2;
      sc.block_size = 32;
      sc.window = window;
      sc.seqs = {{5000, 1}, {4097, 1}, {300, 1}};
      RunScenario(*cuda_, *cpu_, sc, seed++);
    }
  }
}

// Split-K decode steps through the backend (its own zeroed counters), every KV dtype, GQA groups
// 1 to 20 (two head passes), odd key counts: the fused combine, the same step fused again, and
// the combine kernel (SetPagedAttentionCudaFusedCombine) agree bit for bit, and match the CPU.
TEST_F(AttentionCudaTest, SplitKFusedCombineEqualsCombineKernel) {
  // The fused combine runs only with the scalar kernel: compare it with the scalar kernel's
  // combine-kernel path (the tensor-core form has its own test, attention_mma_cuda_test.cc).
  gpu_testing::MmaDecodeScope scalar(false);
  uint32_t seed = 400;
  for (KvDtype dtype : kCacheDtypes) {
    for (int64_t group : {1, 3, 12, 20}) {
      Scenario sc;
      sc.name = absl::StrFormat("dtype %d group %d", static_cast<int>(dtype), group);
      sc.dtype = dtype;
      sc.head_dim = 128;
      sc.group = group;
      sc.kv_heads = group == 20 ? 1 : 2;
      sc.block_size = 16;
      sc.window = group == 3 ? 500 : 0;
      sc.q_pad = 4;
      sc.seqs = {{2999, 1}, {65, 1}, {1001, 1}, {7, 1}};
      sc.compare_combine_paths = true;
      RunScenario(*cuda_, *cpu_, sc, seed++);
    }
  }
}

// Decode steps of one or two rows (where the rule spreads a GQA group over several CTAs: batch 1
// of Step-3.5-Flash is 8 KV heads x 8 splits = 64 CTAs) and a few more, every KV dtype, groups 1 to
// 20 (two passes of 16, or a last CTA with fewer heads), windows: the rule's choice and fixed
// 16 / 4 / 3 / 1 heads per CTA give the same bytes, and match the CPU.
TEST_F(AttentionCudaTest, HeadsPerCtaDoNotChangeTheBits) {
  uint32_t seed = 500;
  for (KvDtype dtype : kCacheDtypes) {
    for (int64_t group : {1, 6, 8, 12, 20}) {
      for (int batch : {1, 2, 5}) {
        Scenario sc;
        sc.name =
            absl::StrFormat("dtype %d group %d batch %d", static_cast<int>(dtype), group, batch);
        sc.dtype = dtype;
        sc.head_dim = 128;
        sc.group = group;
        sc.kv_heads = group == 20 ? 1 : 8;
        sc.block_size = 16;
        sc.window = batch == 2 ? 200 : 0;
        const std::vector<SeqSpec> seqs = {{257, 1}, {1001, 1}, {64, 1}, {2, 1}, {700, 1}};
        sc.seqs.assign(seqs.begin(), seqs.begin() + batch);
        sc.compare_cta_heads = true;
        RunScenario(*cuda_, *cpu_, sc, seed++);
      }
    }
  }
}

TEST_F(AttentionCudaTest, RejectsBadBatches) {
  const int64_t dh = 64, kv_heads = 1, heads = 4, block = 16;
  std::vector<float> zeros(static_cast<size_t>(4 * block * kv_heads * dh), 0.0f);
  BackendBuffer k = UploadBytes(*cuda_, zeros.data(), zeros.size() * 4);
  BackendBuffer v = UploadBytes(*cuda_, zeros.data(), zeros.size() * 4);
  const KvCacheView cache{k.data(), v.data(), KvDtype::kF32, 4, block, kv_heads, dh};
  DeviceMat q = AllocMat(*cuda_, heads * dh, 1);
  DeviceMat out = AllocMat(*cuda_, heads * dh, 1);
  DeviceMat kv_row = AllocMat(*cuda_, kv_heads * dh, 1);
  const std::vector<int32_t> table = {2, -1};
  std::vector<int32_t> positions = {20};
  std::vector<SequenceSlice> seqs = {{0, 1, 21, table}};
  const AttentionParams params{.window = 0, .scale = 0.125f};
  // Position 20 lives in page -1.
  EXPECT_EQ(cuda_->AppendKv(kv_row.view, kv_row.view, {positions, seqs}, cache).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(cuda_->Attention(q.view, {positions, seqs}, cache, params, out.view).code(),
            absl::StatusCode::kOutOfRange);
  // Position beyond the context.
  positions = {30};
  EXPECT_EQ(cuda_->Attention(q.view, {positions, seqs}, cache, params, out.view).code(),
            absl::StatusCode::kOutOfRange);
  // Rows outside Q.
  positions = {3};
  seqs = {{0, 2, 21, table}};
  EXPECT_EQ(cuda_->Attention(q.view, {positions, seqs}, cache, params, out.view).code(),
            absl::StatusCode::kInvalidArgument);
  // Q width not a multiple of head_dim.
  seqs = {{0, 1, 21, table}};
  DeviceMat odd = AllocMat(*cuda_, heads * dh + 1, 1);
  EXPECT_EQ(cuda_->Attention(odd.view, {positions, seqs}, cache, params, odd.view).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(cuda_->Synchronize().ok());
}

// ---- Kernel level: forced split counts against PagedAttentionRef. ----

// GQA groups 1, 5 and 20 (two head passes, so two arrival counters per (row, KV head)), contexts
// of 1, 31, 33, 700 and 1500 keys (7 splits of a 33-key row: one key in the second split, five
// empty ones). Every split count runs fused twice and through the combine kernel, bitwise equal.
TEST(PagedAttentionCudaKernelTest, ForcedSplitsMatchReference) {
  std::unique_ptr<Backend> cuda = CudaBackendOrNull();
  if (!cuda) GTEST_SKIP() << kNoDeviceMessage;
  for (int64_t group : {1, 5, 20}) {
    SCOPED_TRACE(absl::StrFormat("group %d", group));
    std::mt19937 rng(7 + group);
    const int64_t dh = 64, kv_heads = 2, heads = kv_heads * group, block = 16;
    const gpu_testing::DecodeSeqs batch_seqs({1, 31, 33, 700, 1500}, block, 0, rng);
    const int64_t num_blocks = batch_seqs.num_blocks;
    const int64_t rows = batch_seqs.rows();
    const size_t cache_floats = static_cast<size_t>(num_blocks * block * kv_heads * dh);
    std::vector<float> k = RandomVector(cache_floats, 1.0f, rng);
    std::vector<float> v = RandomVector(cache_floats, 1.0f, rng);
    std::vector<float> q = RandomVector(rows * heads * dh, 3.0f, rng);
    std::vector<float> want(rows * heads * dh);
    const kernels::PagedAttentionArgs host =
        gpu_testing::RefArgs(batch_seqs, q.data(), want.data(), heads * dh, heads, 0, 0.125f,
                             {k.data(), v.data(), KvDtype::kF32, num_blocks, block, kv_heads, dh});
    ASSERT_EQ(kernels::PagedAttentionRef(host), KernelStatus::kOk);
    kernels::PagedAttentionCudaBatch batch;
    ASSERT_EQ(kernels::FlattenPagedAttentionBatch(host, &batch), KernelStatus::kOk);

    BackendBuffer dk = UploadBytes(*cuda, k.data(), k.size() * 4);
    BackendBuffer dv = UploadBytes(*cuda, v.data(), v.size() * 4);
    BackendBuffer dq = UploadBytes(*cuda, q.data(), q.size() * 4);
    BackendBuffer dout = UploadBytes(*cuda, q.data(), q.size() * 4);
    BackendBuffer dwords = UploadBytes(*cuda, batch.words.data(), batch.words.size() * 4);
    // The kernel runs on the legacy default stream below, which does not wait for the backend's.
    ASSERT_TRUE(cuda->Synchronize().ok());
    for (int64_t splits : {1, 2, 7, 64}) {
      SCOPED_TRACE(splits);
      kernels::PagedAttentionCudaArgs a = gpu_testing::DeviceAttentionArgs(
          host, batch, dq.data(), dout.data(), dwords.data(), dk.data(), dv.data());
      a.splits = splits;
      a.scratch_bytes = kernels::PagedAttentionCudaScratchBytes(rows, heads, dh, splits);
      absl::StatusOr<BackendBuffer> scratch = cuda->Allocate(std::max<int64_t>(a.scratch_bytes, 1));
      ASSERT_TRUE(scratch.ok());
      a.scratch = scratch->data();
      const std::vector<float> got = gpu_testing::RunFusedAndCombineKernel(a, q.size());
      EXPECT_LE(RelError(got, want), kMaxRelErrorF32Cache);
    }
  }
}

}  // namespace
}  // namespace stepserve
