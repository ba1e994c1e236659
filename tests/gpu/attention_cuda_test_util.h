// Helpers shared by the paged-attention kernel tests (attention_cuda_test.cc,
// attention_q8_cuda_test.cc, attention_gate_cuda_test.cc, attention_mma_cuda_test.cc,
// prefill_attention_cuda_test.cc): random data, the relative error, decode-shaped batches and the
// reference's / the kernel's arguments over them, the switches' scopes, and the split-K checks -
// the fused combine (the last CTA per (row, KV head) combines) run twice in a row and the
// two-kernel path must give the same bytes.
#ifndef STEPSERVE_TESTS_GPU_ATTENTION_CUDA_TEST_UTIL_H_
#define STEPSERVE_TESTS_GPU_ATTENTION_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/paged_attention_cuda.h"

namespace stepserve::gpu_testing {

inline std::vector<float> RandomVector(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ||got - want|| / ||want||; infinite when `got` holds a NaN or an infinity.
inline double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

// Decode-shaped sequences for the kernel tests: one query row at the end of each context (two
// from 601 keys: speculative verification), their pages shuffled over `num_blocks` (`spare` pages
// no sequence owns), the block tables in `table_words`.
struct DecodeSeqs {
  std::vector<int32_t> table_words;
  std::vector<kernels::AttentionSeq> seqs;
  std::vector<int32_t> positions;
  int64_t num_blocks = 0;

  DecodeSeqs(const std::vector<int64_t>& contexts, int64_t block, int64_t spare,
             std::mt19937& rng) {
    for (int64_t c : contexts) num_blocks += (c + block - 1) / block;
    num_blocks += spare;
    table_words.resize(static_cast<size_t>(num_blocks));
    std::iota(table_words.begin(), table_words.end(), 0);
    std::shuffle(table_words.begin(), table_words.end(), rng);
    int64_t at = 0;
    for (int64_t c : contexts) {
      kernels::AttentionSeq s;
      s.q_begin = static_cast<int64_t>(positions.size());
      s.q_count = c > 600 ? 2 : 1;
      s.context_len = c;
      s.block_table = table_words.data() + at;
      s.block_table_len = (c + block - 1) / block;
      at += s.block_table_len;
      for (int64_t p = c - s.q_count; p < c; ++p) positions.push_back(static_cast<int32_t>(p));
      seqs.push_back(s);
    }
  }
  int64_t rows() const { return static_cast<int64_t>(positions.size()); }
  DecodeSeqs(const DecodeSeqs&) = delete;  // seqs point into table_words
  DecodeSeqs& operator=(const DecodeSeqs&) = delete;
};

// PagedAttentionRef's arguments over `batch`: Q and out rows of `stride` floats on the host.
inline kernels::PagedAttentionArgs RefArgs(const DecodeSeqs& batch, const float* q, float* out,
                                           int64_t stride, int64_t heads, int64_t window,
                                           float scale, const kernels::PagedKv& kv) {
  kernels::PagedAttentionArgs host;
  host.q = q;
  host.q_stride = stride;
  host.out = out;
  host.out_stride = stride;
  host.positions = batch.positions.data();
  host.seqs = batch.seqs.data();
  host.n_seqs = static_cast<int64_t>(batch.seqs.size());
  host.heads = heads;
  host.window = window;
  host.scale = scale;
  host.kv = kv;
  return host;
}

// PagedAttentionCuda's arguments for the reference batch `host` flattened into `batch`, with Q,
// out, the flattened words and the K / V pages in device memory (splits, scratch and the head gate
// left for the caller).
inline kernels::PagedAttentionCudaArgs DeviceAttentionArgs(
    const kernels::PagedAttentionArgs& host, const kernels::PagedAttentionCudaBatch& batch,
    const void* q, void* out, const void* words, void* k, void* v) {
  kernels::PagedAttentionCudaArgs a;
  a.q = static_cast<const float*>(q);
  a.q_stride = host.q_stride;
  a.out = static_cast<float*>(out);
  a.out_stride = host.out_stride;
  a.rows = static_cast<const kernels::PagedAttentionCudaRow*>(words);
  a.n_rows = batch.n_rows;
  a.block_tables = static_cast<const int32_t*>(words) + batch.tables_offset;
  a.heads = host.heads;
  a.window = host.window;
  a.scale = host.scale;
  a.kv = host.kv;
  a.kv.k = k;
  a.kv.v = v;
  return a;
}

// Sets one of the decode attention's process-wide switches for its lifetime through its setter
// (which returns the previous value), then restores it, even when an assertion returns early.
template <typename T, T (*kSet)(T)>
class SettingScope {
 public:
  explicit SettingScope(T value) : previous_(kSet(value)) {}
  ~SettingScope() { kSet(previous_); }
  SettingScope(const SettingScope&) = delete;
  SettingScope& operator=(const SettingScope&) = delete;

 private:
  T previous_;
};
// The combine path (fused in the last CTA or the combine kernel).
using FusedCombineScope = SettingScope<bool, kernels::SetPagedAttentionCudaFusedCombine>;
// The tensor-core decode attention (STEPSERVE_ATTN_MMA_DECODE).
using MmaDecodeScope = SettingScope<bool, kernels::SetPagedAttentionCudaMmaDecode>;
// The decode kernel's query heads per CTA (0: the rule).
using CtaHeadsScope = SettingScope<int, kernels::SetPagedAttentionCudaCtaHeads>;

// Whether a decode launch of this cache type, head dim and GQA group takes the tensor-core form:
// its switch on and PagedAttentionCudaMmaSupports on that shape (null pointers and zero strides
// pass its alignment checks, as the tests' aligned buffers do). Its Q, K, P and V rounded to F16
// put the relative output error near 1e-3 instead of F32 rounding's 1e-6, so the tests' bounds on
// that path are kMaxRelErrorMmaDecode.
inline bool MmaDecodeTakes(kernels::KvDtype dtype, int64_t head_dim, int64_t group) {
  kernels::PagedAttentionCudaArgs shape;
  shape.kv.dtype = dtype;
  shape.kv.head_dim = head_dim;
  shape.kv.kv_heads = 1;
  shape.heads = group;
  return kernels::PagedAttentionCudaMmaDecode() && kernels::PagedAttentionCudaMmaSupports(shape);
}
inline constexpr double kMaxRelErrorMmaDecode = 4e-3;

// Runs PagedAttentionCuda(`a`) on the legacy default stream three times - fused combine, fused
// again on the same counters (they must have been left at zero), the combine kernel - each with
// `a.out` (`out_floats` floats) and `a.scratch` NaN-poisoned first, so a partial read before its
// writer's fence, or stale, shows. Checks each run's combine-kernel launches (one only for the
// last, and only when a.splits > 1), the three outputs bitwise equal and the counters zero at the
// end. `a.split_arrivals` is set here (zeroed device counters). Returns the first run's output.
inline std::vector<float> RunFusedAndCombineKernel(kernels::PagedAttentionCudaArgs a,
                                                   size_t out_floats) {
  std::vector<std::vector<float>> outs;
  const int64_t count = std::max<int64_t>(
      kernels::PagedAttentionCudaArrivalCount(a.n_rows, a.heads, a.kv.kv_heads), 1);
  void* allocated = nullptr;
  EXPECT_EQ(cudaMalloc(&allocated, count * sizeof(int32_t)), cudaSuccess);
  if (allocated == nullptr) return {};
  int32_t* arrivals = static_cast<int32_t*>(allocated);
  EXPECT_EQ(cudaMemset(arrivals, 0, count * sizeof(int32_t)), cudaSuccess);
  a.split_arrivals = arrivals;
  a.split_arrival_count = count;
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE(run < 2 ? "fused combine" : "combine kernel");
    const bool fused = run < 2;
    FusedCombineScope scope(fused);
    EXPECT_EQ(cudaMemset(a.out, 0xFF, out_floats * sizeof(float)), cudaSuccess);  // NaN
    if (a.splits > 1) {
      EXPECT_EQ(cudaMemset(a.scratch, 0xFF, a.scratch_bytes), cudaSuccess);
    }
    const int64_t combines = kernels::PagedAttentionCudaCombineLaunches();
    EXPECT_EQ(kernels::PagedAttentionCuda(a, nullptr), kernels::KernelStatus::kOk);
    EXPECT_EQ(kernels::PagedAttentionCudaCombineLaunches() - combines,
              a.splits > 1 && !fused ? 1 : 0);
    std::vector<float> got(out_floats);
    EXPECT_EQ(cudaMemcpy(got.data(), a.out, out_floats * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    if (!outs.empty()) {
      EXPECT_EQ(std::memcmp(got.data(), outs[0].data(), out_floats * sizeof(float)), 0)
          << "run " << run << " differs from the first fused run";
    }
    outs.push_back(std::move(got));
  }
  std::vector<int32_t> left(static_cast<size_t>(count), -1);
  EXPECT_EQ(cudaMemcpy(left.data(), arrivals, count * sizeof(int32_t), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int64_t i = 0; i < count; ++i) EXPECT_EQ(left[i], 0) << "arrival counter " << i;
  cudaFree(arrivals);
  return outs[0];
}

}  // namespace stepserve::gpu_testing

#endif  // STEPSERVE_TESTS_GPU_ATTENTION_CUDA_TEST_UTIL_H_
