// The tensor-core prefill attention (PrefillAttentionCuda) against PagedAttentionRef on fresh
// random data, its tiling (BuildPrefillTiles, host only) and the backend's routing.
//
// Kernel cases: head_dim 128 and 192, GQA groups 1, 3, 8, 12 and 16, full attention and windows 512
// and 37 (a window smaller than a tile, so key tiles are cut inside a warp's rows), prompts of 1-3
// sequences of 16, 63, 64, 65, 200, 700 rows, prefill chunks that start at a nonzero position
// (the earlier context already cached), block sizes 16 and 32, pages shuffled over the cache, F32,
// F16 and Q8_0 pages, some cases with the head gate in the epilogue (the reference output times
// sigmoid of random logits). The cache is poisoned with 0xFF bytes (NaN in F32 / F16, a NaN scale
// in Q8_0) before the context is written through KvAppendRef, and pages before every row's window
// are freed (-1), so a read of anything a row may not see shows. Outputs are poisoned with NaN: the
// rows BuildPrefillTiles leaves out (decode rows, runs under 16) and the padding columns of strided
// Q / out must stay NaN.
//
// Bound: ||out - ref|| / ||ref|| <= 5e-3 per case. The kernel rounds Q (scaled), K, the
// probabilities P and V to F16 (relative 2^-11 each) and accumulates in F32; the reference reads
// the same cache values in double. With these scores (|s| of order 1-2) the rounding of Q and K
// moves each score by ~1e-3 absolute, and the rounding of P and V each weight / value by ~3e-4
// relative, so the expected error is ~1e-3; an indexing, masking or softmax error gives errors of
// order 0.1-1 (or NaN). The measured error is printed per case.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "gtest/gtest.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/common/cuda_check.h"
#include "tests/gpu/attention_cuda_test_util.h"
#include "tests/gpu/backend_test_util.h"
#include "tests/gpu/cuda_test_util.h"

namespace stepserve {
namespace {

using gpu_testing::kNoDeviceMessage;
using kernels::KernelStatus;
using kernels::PrefillTileCuda;
using kernels::testing::CopyToDevice;
using kernels::testing::DeviceBuffer;
using kernels::testing::HaveCudaDevice;

constexpr double kMaxRelError = 5e-3;
constexpr int64_t kMinRows = 16;  // as the backend

std::vector<float> RandomVector(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Query rows: the last q_count positions of a context of `context` tokens (a fresh prompt when
// q_count == context, a later chunk otherwise, a decode row when q_count == 1).
struct SeqSpec {
  int64_t context = 0;
  int64_t q_count = 0;
};

struct Case {
  std::string name;
  int64_t head_dim = 128;
  int64_t kv_heads = 2;
  int64_t group = 8;
  int64_t block_size = 16;
  int64_t window = 0;
  KvDtype dtype = KvDtype::kF32;
  std::vector<SeqSpec> seqs;
  int64_t q_pad = 0;     // extra floats per Q / out row
  float q_scale = 3.0f;  // Q uniform in [-q_scale, q_scale], K and V in [-1, 1]
  bool gated = false;    // with the head gate (logits uniform in [-4, 4], stride heads + 3)
};

void RunCase(const Case& c, uint32_t seed) {
  SCOPED_TRACE(c.name);
  std::mt19937 rng(seed);
  const int64_t dh = c.head_dim, bs = c.block_size, heads = c.kv_heads * c.group;
  const int64_t width = heads * dh, stride = width + c.q_pad, width_kv = c.kv_heads * dh;

  // Pages of every sequence, shuffled over the cache (plus three nobody owns).
  int64_t num_blocks = 3;
  for (const SeqSpec& s : c.seqs) num_blocks += (s.context + bs - 1) / bs;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables;
  int64_t next = 0;
  for (const SeqSpec& s : c.seqs) {
    const int64_t pages = (s.context + bs - 1) / bs;
    tables.emplace_back(ids.begin() + next, ids.begin() + next + pages);
    next += pages;
  }

  // The cache: 0xFF bytes, then every cached position written by the reference append.
  const size_t cache_bytes =
      static_cast<size_t>(num_blocks * bs * c.kv_heads * kernels::KvVectorBytes(c.dtype, dh));
  std::vector<uint8_t> k_cache(cache_bytes, 0xFF), v_cache(cache_bytes, 0xFF);
  const kernels::PagedKv host_kv{
      k_cache.data(), v_cache.data(), c.dtype, num_blocks, bs, c.kv_heads, dh};
  std::vector<int64_t> slots;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int64_t p = 0; p < c.seqs[s].context; ++p)
      slots.push_back(tables[s][p / bs] * bs + p % bs);
  }
  const int64_t tokens = static_cast<int64_t>(slots.size());
  const std::vector<float> k = RandomVector(tokens * width_kv, 1.0f, rng);
  const std::vector<float> v = RandomVector(tokens * width_kv, 1.0f, rng);
  kernels::KvAppendArgs append;
  append.k = k.data();
  append.k_stride = width_kv;
  append.v = v.data();
  append.v_stride = width_kv;
  append.tokens = tokens;
  append.slots = slots.data();
  append.kv = host_kv;
  ASSERT_EQ(kernels::KvAppendRef(append), KernelStatus::kOk);

  // The step's rows; with a window, pages before every row's window are freed.
  std::vector<int32_t> positions;
  std::vector<kernels::AttentionSeq> seqs;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const SeqSpec& spec = c.seqs[s];
    kernels::AttentionSeq seq;
    seq.q_begin = static_cast<int64_t>(positions.size());
    seq.q_count = spec.q_count;
    seq.context_len = spec.context;
    for (int64_t p = spec.context - spec.q_count; p < spec.context; ++p) {
      positions.push_back(static_cast<int32_t>(p));
    }
    if (c.window > 0) {
      const int64_t earliest = std::max<int64_t>(0, spec.context - spec.q_count - c.window + 1);
      for (int64_t page = 0; (page + 1) * bs <= earliest; ++page) tables[s][page] = -1;
    }
    seq.block_table = tables[s].data();
    seq.block_table_len = static_cast<int64_t>(tables[s].size());
    seqs.push_back(seq);
  }
  const int64_t rows = static_cast<int64_t>(positions.size());
  const std::vector<float> q = RandomVector(rows * stride, c.q_scale, rng);
  std::vector<float> want(rows * stride, 0.0f);
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
  host.scale = 1.0f / std::sqrt(static_cast<float>(dh));
  host.kv = host_kv;
  ASSERT_EQ(kernels::PagedAttentionRef(host), KernelStatus::kOk);
  const int64_t gate_stride = heads + 3;
  const std::vector<float> gate = RandomVector(rows * gate_stride, 4.0f, rng);
  if (c.gated) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < width; ++i) {
        want[r * stride + i] *= 1.0f / (1.0f + std::exp(-gate[r * gate_stride + i / dh]));
      }
    }
  }

  kernels::PagedAttentionCudaBatch batch;
  ASSERT_EQ(kernels::FlattenPagedAttentionBatch(host, &batch), KernelStatus::kOk);
  std::vector<PrefillTileCuda> tiles;
  const int64_t left_out = kernels::BuildPrefillTiles(batch, kMinRows, &tiles);
  ASSERT_FALSE(tiles.empty());
  // Which Q rows the tiles cover (records are in row order here: record r is Q row r).
  std::vector<bool> covered(rows, false);
  for (const PrefillTileCuda& t : tiles) {
    for (int32_t r = t.first_record; r < t.first_record + t.count; ++r)
      covered[batch.words[4 * r]] = true;
  }
  int64_t expect_left_out = 0;
  for (const SeqSpec& s : c.seqs) expect_left_out += s.q_count < kMinRows ? s.q_count : 0;
  EXPECT_EQ(left_out, expect_left_out);
  EXPECT_EQ(std::count(covered.begin(), covered.end(), true), rows - left_out);

  DeviceBuffer dk(cache_bytes), dv(cache_bytes), dq(q.size() * 4), dout(q.size() * 4);
  DeviceBuffer dwords(batch.words.size() * 4), dtiles(tiles.size() * sizeof(PrefillTileCuda));
  DeviceBuffer dgate(gate.size() * 4);
  ASSERT_TRUE(dk.ptr && dv.ptr && dq.ptr && dout.ptr && dwords.ptr && dtiles.ptr && dgate.ptr);
  ASSERT_TRUE(CopyToDevice(dgate.ptr, gate.data(), gate.size() * 4));
  ASSERT_TRUE(CopyToDevice(dk.ptr, k_cache.data(), cache_bytes));
  ASSERT_TRUE(CopyToDevice(dv.ptr, v_cache.data(), cache_bytes));
  ASSERT_TRUE(CopyToDevice(dq.ptr, q.data(), q.size() * 4));
  ASSERT_TRUE(CopyToDevice(dwords.ptr, batch.words.data(), batch.words.size() * 4));
  ASSERT_TRUE(CopyToDevice(dtiles.ptr, tiles.data(), tiles.size() * sizeof(PrefillTileCuda)));
  ASSERT_EQ(cudaMemset(dout.ptr, 0xFF, q.size() * 4), cudaSuccess);  // NaN

  kernels::PagedAttentionCudaArgs a =
      gpu_testing::DeviceAttentionArgs(host, batch, dq.ptr, dout.ptr, dwords.ptr, dk.ptr, dv.ptr);
  if (c.gated) {
    a.gate = static_cast<const float*>(dgate.ptr);
    a.gate_stride = gate_stride;
  }
  ASSERT_EQ(kernels::PrefillAttentionCuda(a, static_cast<const PrefillTileCuda*>(dtiles.ptr),
                                          static_cast<int64_t>(tiles.size()), nullptr),
            KernelStatus::kOk);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(q.size());
  ASSERT_EQ(cudaMemcpy(got.data(), dout.ptr, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);

  double diff = 0.0, norm = 0.0;
  int64_t nonfinite = 0, written_outside = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < stride; ++i) {
      const float x = got[r * stride + i];
      if (!covered[r] || i >= width) {
        written_outside += std::isnan(x) ? 0 : 1;
        continue;
      }
      if (!std::isfinite(x)) {
        ++nonfinite;
        continue;
      }
      const double want_x = want[r * stride + i];
      diff += (x - want_x) * (x - want_x);
      norm += want_x * want_x;
    }
  }
  const double rel = std::sqrt(diff / std::max(norm, 1e-300));
  std::printf("[ prefill  ] %-48s rows %4lld tiles %3zu rel %.3g\n", c.name.c_str(),
              static_cast<long long>(rows), tiles.size(), rel);
  EXPECT_EQ(nonfinite, 0);
  EXPECT_EQ(written_outside, 0) << "rows left out or padding columns were written";
  EXPECT_LE(rel, kMaxRelError);
}

const char* DtypeName(KvDtype dtype) {
  return dtype == KvDtype::kF16 ? "f16" : dtype == KvDtype::kQ8_0 ? "q8_0" : "f32";
}

// Every dtype x head_dim x window, groups and block sizes alternating, three batch shapes.
TEST(PrefillAttentionCudaTest, MatchesReferenceAcrossShapes) {
  if (!HaveCudaDevice()) GTEST_SKIP() << kNoDeviceMessage;
  // Fresh prompts at the tile boundaries plus a decode row (left out); two chunks that start
  // after cached context (200 and 64); one strided 200-row prompt.
  const std::vector<std::vector<SeqSpec>> batches = {
      {{16, 16}, {63, 63}, {64, 64}, {65, 65}, {40, 1}},
      {{263, 63}, {129, 65}},
      {{200, 200}},
  };
  int i = 0;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
    for (int64_t head_dim : {128, 192}) {
      for (int64_t window : {0, 512, 37}) {
        Case c;
        c.dtype = dtype;
        c.head_dim = head_dim;
        c.window = window;
        c.group = (i + i / 6) % 2 == 0 ? 8 : 12;
        c.block_size = (i / 2) % 2 == 0 ? 16 : 32;
        c.seqs = batches[i % 3];
        c.q_pad = i % 3 == 2 ? 8 : 0;
        c.gated = i % 4 == 1;
        c.name = absl::StrFormat("%s dh %d group %d window %d block %d batch %d%s",
                                 DtypeName(dtype), head_dim, c.group, window, c.block_size, i % 3,
                                 c.gated ? " gated" : "");
        RunCase(c, 1000 + i);
        ++i;
      }
    }
  }
}

// Long prompts (window 512 actually cutting), a chunk after 700 cached tokens, the Step-5 shape
// (head_dim 192, group 16), sharper softmax.
TEST(PrefillAttentionCudaTest, LongPromptsMatchReference) {
  if (!HaveCudaDevice()) GTEST_SKIP() << kNoDeviceMessage;
  struct Long {
    KvDtype dtype;
    int64_t head_dim, group, window, block_size;
    float q_scale;
  };
  const Long longs[] = {
      {KvDtype::kF16, 128, 8, 0, 16, 3.0f},    {KvDtype::kF32, 128, 12, 512, 32, 3.0f},
      {KvDtype::kQ8_0, 128, 8, 512, 16, 3.0f}, {KvDtype::kF16, 192, 16, 0, 32, 3.0f},
      {KvDtype::kF32, 192, 12, 37, 16, 6.0f},
  };
  int i = 0;
  for (const Long& l : longs) {
    Case c;
    c.dtype = l.dtype;
    c.head_dim = l.head_dim;
    c.kv_heads = 1;
    c.group = l.group;
    c.window = l.window;
    c.block_size = l.block_size;
    c.q_scale = l.q_scale;
    c.seqs = {{700, 700}, {900, 200}, {50, 1}};
    c.gated = i == 1;
    c.name = absl::StrFormat("long %s dh %d group %d window %d q %.0f%s", DtypeName(l.dtype),
                             l.head_dim, l.group, l.window, l.q_scale, c.gated ? " gated" : "");
    RunCase(c, 2000 + i++);
  }
}

// Odd groups (1 and 3 query heads per KV head): with STEPSERVE_PREFILL_SHARED_KV=1 the launcher
// pairs the heads of a CTA only for even groups, so these keep one head per CTA in either setting
// (the cases above, all even groups, take the paired kernel when it is on).
TEST(PrefillAttentionCudaTest, OddGroupsMatchReference) {
  if (!HaveCudaDevice()) GTEST_SKIP() << kNoDeviceMessage;
  int i = 0;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16}) {
    for (int64_t group : {1, 3}) {
      Case c;
      c.dtype = dtype;
      c.group = group;
      c.kv_heads = 3;
      c.window = i % 2 == 0 ? 0 : 37;
      c.seqs = {{130, 130}, {263, 63}};
      c.name = absl::StrFormat("odd %s group %d window %d", DtypeName(dtype), group, c.window);
      RunCase(c, 3000 + i++);
    }
  }
}

// ---- Host side (runs without a device). ----

// A host batch of sequences {context, positions}, flattened as the backend flattens it.
struct HostTilesBatch {
  std::vector<int32_t> positions;
  std::vector<std::vector<int32_t>> tables;
  std::vector<kernels::AttentionSeq> seqs;
  kernels::PagedAttentionCudaBatch batch;
};

void Flatten(const std::vector<std::vector<int32_t>>& seq_positions, HostTilesBatch* b) {
  constexpr int64_t kBlock = 16;
  int32_t page = 0;
  for (const std::vector<int32_t>& ps : seq_positions) {
    const int64_t context = *std::max_element(ps.begin(), ps.end()) + 1;
    std::vector<int32_t> table;
    for (int64_t i = 0; i < (context + kBlock - 1) / kBlock; ++i) table.push_back(page++);
    b->tables.push_back(table);
  }
  for (size_t s = 0; s < seq_positions.size(); ++s) {
    kernels::AttentionSeq seq;
    seq.q_begin = static_cast<int64_t>(b->positions.size());
    seq.q_count = static_cast<int64_t>(seq_positions[s].size());
    seq.context_len = static_cast<int64_t>(b->tables[s].size()) * kBlock;
    seq.block_table = b->tables[s].data();
    seq.block_table_len = static_cast<int64_t>(b->tables[s].size());
    b->positions.insert(b->positions.end(), seq_positions[s].begin(), seq_positions[s].end());
    b->seqs.push_back(seq);
  }
  static float dummy = 0.0f;
  static int dummy_cache = 0;
  kernels::PagedAttentionArgs a;
  a.q = &dummy;
  a.out = &dummy;
  a.q_stride = a.out_stride = 128;
  a.positions = b->positions.data();
  a.seqs = b->seqs.data();
  a.n_seqs = static_cast<int64_t>(b->seqs.size());
  a.heads = 1;
  a.scale = 0.1f;
  a.kv = {&dummy_cache, &dummy_cache, KvDtype::kF32, page, kBlock, 1, 128};
  ASSERT_EQ(kernels::FlattenPagedAttentionBatch(a, &b->batch), KernelStatus::kOk);
}

std::vector<int32_t> Range(int32_t first, int32_t count) {
  std::vector<int32_t> v(count);
  std::iota(v.begin(), v.end(), first);
  return v;
}

using Tiles = std::vector<std::pair<int32_t, int32_t>>;

Tiles AsPairs(const std::vector<PrefillTileCuda>& tiles) {
  Tiles out;
  for (const PrefillTileCuda& t : tiles) out.emplace_back(t.first_record, t.count);
  return out;
}

TEST(PrefillTilesHostTest, CutsARunIntoTilesOf64) {
  HostTilesBatch b;
  ASSERT_NO_FATAL_FAILURE(Flatten({Range(10, 150)}, &b));
  std::vector<PrefillTileCuda> tiles = {{7, 7}};  // overwritten
  EXPECT_EQ(kernels::BuildPrefillTiles(b.batch, 16, &tiles), 0);
  EXPECT_EQ(AsPairs(tiles), (Tiles{{0, 64}, {64, 64}, {128, 22}}));
  HostTilesBatch exact;
  ASSERT_NO_FATAL_FAILURE(Flatten({Range(0, 128)}, &exact));
  EXPECT_EQ(kernels::BuildPrefillTiles(exact.batch, 16, &tiles), 0);
  EXPECT_EQ(AsPairs(tiles), (Tiles{{0, 64}, {64, 64}}));
}

TEST(PrefillTilesHostTest, LeavesShortRunsOut) {
  // A 20-row prompt, a decode row, a 16-row chunk at 40, a 15-row chunk at 3.
  HostTilesBatch b;
  ASSERT_NO_FATAL_FAILURE(Flatten({Range(0, 20), {77}, Range(40, 16), Range(3, 15)}, &b));
  std::vector<PrefillTileCuda> tiles;
  EXPECT_EQ(kernels::BuildPrefillTiles(b.batch, 16, &tiles), 1 + 15);
  EXPECT_EQ(AsPairs(tiles), (Tiles{{0, 20}, {21, 16}}));
  EXPECT_EQ(kernels::BuildPrefillTiles(b.batch, 1, &tiles), 0);
  EXPECT_EQ(AsPairs(tiles), (Tiles{{0, 20}, {20, 1}, {21, 16}, {37, 15}}));
  EXPECT_EQ(kernels::BuildPrefillTiles(b.batch, 0, &tiles), 0);  // as 1
  EXPECT_EQ(tiles.size(), 4u);
}

TEST(PrefillTilesHostTest, RunsBreakAtGapsAndSequences) {
  // One sequence with a gap (5, 6 | 8, 9, 10), a repeated position (20 | 20, 21), and a second
  // sequence whose positions continue the first's (11, 12): never merged into one run.
  HostTilesBatch b;
  ASSERT_NO_FATAL_FAILURE(Flatten({{5, 6, 8, 9, 10, 20, 20, 21}, {22, 23}}, &b));
  std::vector<PrefillTileCuda> tiles;
  EXPECT_EQ(kernels::BuildPrefillTiles(b.batch, 1, &tiles), 0);
  EXPECT_EQ(AsPairs(tiles), (Tiles{{0, 2}, {2, 3}, {5, 1}, {6, 2}, {8, 2}}));
  EXPECT_EQ(kernels::BuildPrefillTiles(b.batch, 3, &tiles), 2 + 1 + 2 + 2);
  EXPECT_EQ(AsPairs(tiles), (Tiles{{2, 3}}));
  kernels::PagedAttentionCudaBatch empty;
  EXPECT_EQ(kernels::BuildPrefillTiles(empty, 16, &tiles), 0);
  EXPECT_TRUE(tiles.empty());
}

TEST(PrefillAttentionCudaHostTest, ChecksArgumentsWithoutLaunching) {
  alignas(16) static int dummy[8] = {};
  kernels::PagedAttentionCudaArgs a;
  a.q = reinterpret_cast<const float*>(dummy);
  a.out = reinterpret_cast<float*>(dummy);
  a.q_stride = a.out_stride = 16 * 128;
  a.rows = reinterpret_cast<const kernels::PagedAttentionCudaRow*>(dummy);
  a.n_rows = 1;
  a.block_tables = dummy;
  a.heads = 16;
  a.scale = 0.1f;
  a.kv = {dummy, dummy, KvDtype::kF16, 4, 16, 2, 128};
  const auto* tiles = reinterpret_cast<const PrefillTileCuda*>(dummy);
  EXPECT_TRUE(kernels::PrefillAttentionCudaSupports(a.kv));
  EXPECT_EQ(kernels::PrefillAttentionCuda(a, tiles, 0, nullptr), KernelStatus::kOk);  // no tiles
  EXPECT_EQ(kernels::PrefillAttentionCuda(a, nullptr, 1, nullptr), KernelStatus::kInvalidArgument);
  EXPECT_EQ(kernels::PrefillAttentionCuda(a, tiles, -1, nullptr), KernelStatus::kInvalidArgument);
  a.heads = 15;  // not a multiple of kv_heads: the shared validation
  EXPECT_EQ(kernels::PrefillAttentionCuda(a, tiles, 1, nullptr), KernelStatus::kInvalidArgument);
  a.heads = 16;
  a.kv.head_dim = 64;  // no kernel for it: the caller falls back
  a.q_stride = a.out_stride = 16 * 64;
  EXPECT_FALSE(kernels::PrefillAttentionCudaSupports(a.kv));
  EXPECT_EQ(kernels::PrefillAttentionCuda(a, tiles, 1, nullptr), KernelStatus::kUnsupportedType);
  a.kv.head_dim = 192;
  EXPECT_TRUE(kernels::PrefillAttentionCudaSupports(a.kv));
  a.kv.k = reinterpret_cast<char*>(dummy) + 8;  // F16 pages must be 16-byte aligned
  EXPECT_FALSE(kernels::PrefillAttentionCudaSupports(a.kv));
  a.kv.dtype = KvDtype::kQ8_0;  // Q8_0: 2-byte aligned is enough
  EXPECT_TRUE(kernels::PrefillAttentionCudaSupports(a.kv));

  const bool was = kernels::SetPrefillAttentionCuda(true);
  EXPECT_TRUE(kernels::PrefillAttentionCudaEnabled());
  EXPECT_TRUE(kernels::SetPrefillAttentionCuda(false));
  EXPECT_FALSE(kernels::PrefillAttentionCudaEnabled());
  kernels::SetPrefillAttentionCuda(was);
}

// ---- Backend: the switch routes an all-prefill batch through the kernel. ----

// Restores the switch however the test ends.
class PrefillSwitchGuard {
 public:
  PrefillSwitchGuard() : was_(kernels::SetPrefillAttentionCuda(true)) {}
  ~PrefillSwitchGuard() { kernels::SetPrefillAttentionCuda(was_); }

 private:
  bool was_;
};

struct BackendBatch {
  std::vector<int32_t> positions;
  std::vector<SequenceSlice> slices;
  AttentionBatch view() const { return {positions, slices}; }
};

TEST(PrefillAttentionBackendTest, SwitchRoutesPrefillBatchesAndMatchesCpu) {
  std::unique_ptr<Backend> cuda = gpu_testing::CudaBackendOrNull();
  if (!cuda) GTEST_SKIP() << kNoDeviceMessage;
  absl::StatusOr<std::unique_ptr<Backend>> cpu_or = CreateBackend("cpu", {.num_threads = 4});
  ASSERT_TRUE(cpu_or.ok());
  Backend& cpu = **cpu_or;
  const PrefillSwitchGuard guard;
  uint32_t seed = 3000;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
    for (int64_t window : {0, 128}) {
      SCOPED_TRACE(absl::StrFormat("%s window %d", DtypeName(dtype), window));
      std::mt19937 rng(seed++);
      const int64_t dh = 128, kv_heads = 2, group = 8, bs = 16, heads = kv_heads * group;
      const int64_t width = heads * dh, width_kv = kv_heads * dh;
      // A 100-token prompt, a 80-token chunk after 220 cached tokens, and a decode row.
      const std::vector<SeqSpec> specs = {{100, 100}, {300, 80}, {57, 1}};
      int64_t num_blocks = 2;
      for (const SeqSpec& s : specs) num_blocks += (s.context + bs - 1) / bs;
      std::vector<int32_t> ids(num_blocks);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<std::vector<int32_t>> tables;
      int64_t next = 0;
      for (const SeqSpec& s : specs) {
        const int64_t pages = (s.context + bs - 1) / bs;
        tables.emplace_back(ids.begin() + next, ids.begin() + next + pages);
        next += pages;
      }
      const size_t cache_bytes =
          static_cast<size_t>(num_blocks * bs * kv_heads * kernels::KvVectorBytes(dtype, dh));
      std::vector<uint8_t> cpu_k(cache_bytes, 0xFF), cpu_v(cache_bytes, 0xFF);
      BackendBuffer dev_k = gpu_testing::UploadBytes(*cuda, cpu_k.data(), cache_bytes);
      BackendBuffer dev_v = gpu_testing::UploadBytes(*cuda, cpu_v.data(), cache_bytes);
      const KvCacheView cpu_cache{cpu_k.data(), cpu_v.data(), dtype, num_blocks, bs, kv_heads, dh};
      KvCacheView dev_cache = cpu_cache;
      dev_cache.k = dev_k.data();
      dev_cache.v = dev_v.data();

      // Fill every context on both backends.
      BackendBatch fill;
      for (size_t s = 0; s < specs.size(); ++s) {
        const int64_t q_begin = static_cast<int64_t>(fill.positions.size());
        for (int64_t p = 0; p < specs[s].context; ++p) fill.positions.push_back(int32_t(p));
        fill.slices.push_back({q_begin, specs[s].context, specs[s].context, tables[s]});
      }
      const int64_t fill_rows = static_cast<int64_t>(fill.positions.size());
      std::vector<float> k = RandomVector(fill_rows * width_kv, 1.0f, rng);
      std::vector<float> v = RandomVector(fill_rows * width_kv, 1.0f, rng);
      ASSERT_TRUE(cpu.AppendKv(TensorView::F32(k.data(), width_kv, fill_rows),
                               TensorView::F32(v.data(), width_kv, fill_rows), fill.view(),
                               cpu_cache)
                      .ok());
      gpu_testing::DeviceMat dk = gpu_testing::UploadMat(*cuda, k, width_kv, fill_rows);
      gpu_testing::DeviceMat dv = gpu_testing::UploadMat(*cuda, v, width_kv, fill_rows);
      ASSERT_TRUE(cuda->AppendKv(dk.view, dv.view, fill.view(), dev_cache).ok());

      // Query batches: the two prefill sequences alone, then with the decode row.
      for (size_t n_seqs : {size_t{2}, size_t{3}}) {
        for (bool enabled : {true, false}) {
          if (n_seqs == 3 && !enabled) continue;
          SCOPED_TRACE(absl::StrFormat("%d sequences, switch %s", n_seqs, enabled ? "on" : "off"));
          kernels::SetPrefillAttentionCuda(enabled);
          BackendBatch query;
          std::vector<std::vector<int32_t>> query_tables(tables.begin(), tables.begin() + n_seqs);
          for (size_t s = 0; s < n_seqs; ++s) {
            const int64_t q_begin = static_cast<int64_t>(query.positions.size());
            for (int64_t p = specs[s].context - specs[s].q_count; p < specs[s].context; ++p) {
              query.positions.push_back(static_cast<int32_t>(p));
            }
            if (window > 0) {
              const int64_t earliest =
                  std::max<int64_t>(0, specs[s].context - specs[s].q_count - window + 1);
              for (int64_t page = 0; (page + 1) * bs <= earliest; ++page) {
                query_tables[s][page] = -1;
              }
            }
            query.slices.push_back({q_begin, specs[s].q_count, specs[s].context, {}});
          }
          for (size_t s = 0; s < n_seqs; ++s) query.slices[s].block_table = query_tables[s];
          const int64_t rows = static_cast<int64_t>(query.positions.size());
          std::vector<float> q = RandomVector(rows * width, 3.0f, rng);
          std::vector<float> want(rows * width, 0.0f);
          const AttentionParams params{.window = window,
                                       .scale = 1.0f / std::sqrt(static_cast<float>(dh))};
          ASSERT_TRUE(cpu.Attention(TensorView::F32(q.data(), width, rows), query.view(), cpu_cache,
                                    params, TensorView::F32(want.data(), width, rows))
                          .ok());
          gpu_testing::DeviceMat dq = gpu_testing::UploadMat(*cuda, q, width, rows);
          gpu_testing::DeviceMat dout = gpu_testing::PoisonedMat(*cuda, width, rows);
          const int64_t launches = kernels::PrefillAttentionCudaLaunches();
          const absl::Status st =
              cuda->Attention(dq.view, query.view(), dev_cache, params, dout.view);
          ASSERT_TRUE(st.ok()) << st;
          const std::vector<float> got = gpu_testing::DownloadMat(*cuda, dout);
          const bool routed = enabled && n_seqs == 2;
          EXPECT_EQ(kernels::PrefillAttentionCudaLaunches(), launches + (routed ? 1 : 0));
          double diff = 0.0, norm = 0.0;
          bool finite = true;
          for (size_t i = 0; i < want.size(); ++i) {
            finite = finite && std::isfinite(got[i]);
            diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
            norm += double(want[i]) * want[i];
          }
          const double rel = std::sqrt(diff / norm);
          std::printf("[ backend  ] %s window %d, %zu sequences, switch %s: rel %.3g\n",
                      DtypeName(dtype), static_cast<int>(window), n_seqs, enabled ? "on" : "off",
                      rel);
          EXPECT_TRUE(finite);
          EXPECT_LE(rel, kMaxRelError);
        }
      }
    }
  }
}

}  // namespace
}  // namespace stepserve
