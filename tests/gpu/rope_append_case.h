// One case of the fused q/k norm + RoPE + KV append checks, shared by the GPU test
// (rope_append_cuda_test.cc) and its host emulation (tests/cuda_emu/rope_append), so both run the
// same shapes on inputs made the same way: random q, k, v rows with padded strides, norm weights,
// rope_freqs, positions up to 70000, and distinct cache slots with row 1 skipped (slot -1).
#ifndef STEPSERVE_TESTS_GPU_ROPE_APPEND_CASE_H_
#define STEPSERVE_TESTS_GPU_ROPE_APPEND_CASE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/rope/rope_cuda.h"

namespace stepserve::kernels::testing {

struct RopeAppendCase {
  int64_t q_heads, k_heads, head_dim, n_rot, tokens;
  bool freq_factors;
};

// Step-3.5 decode shapes (96 or 64 q heads, 8 KV heads, dh 128, n_rot 64 / 128), an odd
// multi-token one with rope_freqs, and the largest head_dim with a few heads.
inline constexpr RopeAppendCase kRopeAppendCases[] = {{96, 8, 128, 64, 1, false},
                                                      {64, 8, 128, 128, 3, true},
                                                      {12, 3, 64, 32, 5, true},
                                                      {5, 1, 256, 96, 2, false}};

struct RopeAppendInputs {
  RopeAppendCase c;
  int64_t q_stride, kv_stride;
  int64_t block_size = 4, num_blocks = 6;
  std::vector<float> q, k, v, q_norm, k_norm, freq;
  std::vector<int32_t> positions;
  std::vector<int64_t> slots;  // one per token; -1 for row 1 when there are two or more

  int64_t total_slots() const { return block_size * num_blocks; }
  int64_t cache_row_bytes(KvDtype dtype) const {
    return c.k_heads * KvVectorBytes(dtype, c.head_dim);
  }
  size_t cache_bytes(KvDtype dtype) const {
    return static_cast<size_t>(total_slots() * cache_row_bytes(dtype));
  }
  // Rows the append must write: those with a slot.
  int64_t cached_rows() const {
    return static_cast<int64_t>(
        std::count_if(slots.begin(), slots.end(), [](int64_t s) { return s >= 0; }));
  }
};

inline RopeAppendInputs MakeRopeAppendInputs(const RopeAppendCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  RopeAppendInputs in;
  in.c = c;
  const int64_t dh = c.head_dim, T = c.tokens;
  in.q_stride = c.q_heads * dh + 3;
  in.kv_stride = c.k_heads * dh + 5;
  auto random = [&](int64_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = scale * normal(rng);
    return v;
  };
  in.q = random(T * in.q_stride, 2.f);
  in.k = random(T * in.kv_stride, 2.f);
  in.v = random(T * in.kv_stride, 1.f);
  in.q_norm = random(dh, 1.f);
  in.k_norm = random(dh, 1.f);
  in.freq.resize(c.n_rot / 2);
  for (float& f : in.freq) f = 1.f + std::abs(normal(rng));
  in.positions.resize(T);
  for (int32_t& p : in.positions) p = std::uniform_int_distribution<int32_t>(0, 70000)(rng);
  in.slots.resize(in.total_slots());
  std::iota(in.slots.begin(), in.slots.end(), 0);
  std::shuffle(in.slots.begin(), in.slots.end(), rng);
  in.slots.resize(T);
  if (T > 1) in.slots[1] = -1;  // a row of no sequence: computed, not cached
  return in;
}

// Where one run's operands live (device memory for the GPU test, host memory in the emulation).
struct RopeAppendPointers {
  float* q;
  float* k;
  const float* v;
  void* k_cache;
  void* v_cache;
  const float* q_norm;
  const float* k_norm;
  const float* freq;
  const int32_t* positions;
  const int64_t* slots;
};

// The arguments of QkNormRopeCuda and KvAppendCuda (and so of QkNormRopeAppendCuda) for a case.
inline void RopeAppendArgs(const RopeAppendInputs& in, KvDtype dtype, const RopeAppendPointers& ptr,
                           QkNormRopeCudaArgs* rope, KvAppendArgs* append) {
  const RopeAppendCase& c = in.c;
  *rope = QkNormRopeCudaArgs{};
  rope->q = ptr.q;
  rope->q_stride = in.q_stride;
  rope->q_heads = c.q_heads;
  rope->q_norm = ptr.q_norm;
  rope->k = ptr.k;
  rope->k_stride = in.kv_stride;
  rope->k_heads = c.k_heads;
  rope->k_norm = ptr.k_norm;
  rope->tokens = c.tokens;
  rope->head_dim = c.head_dim;
  rope->eps = 1e-5f;
  rope->positions = ptr.positions;
  rope->n_rot = c.n_rot;
  rope->base = 10000.f;
  rope->freq_factors = c.freq_factors ? ptr.freq : nullptr;
  *append = KvAppendArgs{};
  append->k = ptr.k;
  append->k_stride = in.kv_stride;
  append->v = ptr.v;
  append->v_stride = in.kv_stride;
  append->tokens = c.tokens;
  append->slots = ptr.slots;
  append->kv = PagedKv{.k = ptr.k_cache,
                       .v = ptr.v_cache,
                       .dtype = dtype,
                       .num_blocks = in.num_blocks,
                       .block_size = in.block_size,
                       .kv_heads = c.k_heads,
                       .head_dim = c.head_dim};
}

}  // namespace stepserve::kernels::testing

#endif  // STEPSERVE_TESTS_GPU_ROPE_APPEND_CASE_H_
