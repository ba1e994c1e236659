// Runs the real sources of QkNormRopeCuda, KvAppendCuda and the fused QkNormRopeAppendCuda under
// the emulator: the fused kernel must leave q, k and the cache pages exactly as the two kernels do,
// and the two-kernel path's pages must equal KvAppendRef's (the CPU append) for its rotated k.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "emu_cuda.h"
// Static shared arrays: one instance for all the coroutine threads of a CTA (CTAs run one at a
// time), as on the device.
#undef __shared__
#define __shared__ static
#include "kernels/attention/kv_append_rope_cuda.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/rope/rope_cuda.h"

namespace emu {
void RunCta(std::function<void()> kernel, unsigned bx, unsigned by, uint32_t order_seed);
}
cudaError_t cudaGetLastError() { return cudaSuccess; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
static uint32_t g_seed = 1;
static int64_t g_ctas = 0;
namespace stepserve::kernels {
inline void WaitForPrimaryGrid() {}
inline void AllowDependentLaunch() {}
template <class... KA, class... A>
cudaError_t LaunchWithPdl(void (*kernel)(KA...), dim3 grid, dim3 block, size_t smem, cudaStream_t,
                          A&&... args) {
  if (block.y != 1 || smem != 0) emu::Fail("launch shape");
  emu::threads = static_cast<int>(block.x);
  gridDim.x = grid.x;
  gridDim.y = grid.y;
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      emu::RunCta([&] { kernel(args...); }, bx, by, g_seed++);
      ++g_ctas;
    }
  }
  return cudaSuccess;
}
}  // namespace stepserve::kernels

#include "kernel_emu.inc"

using namespace stepserve;
using kernels::KernelStatus;
using kernels::KvDtype;

struct Case {
  int64_t q_heads, k_heads, head_dim, n_rot, tokens;
  bool freq_factors;
};

bool RunCase(const Case& c, KvDtype dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t dh = c.head_dim, T = c.tokens;
  const int64_t q_stride = c.q_heads * dh + 3, kv_stride = c.k_heads * dh + 5;
  const int64_t block_size = 4, num_blocks = 6, total_slots = block_size * num_blocks;
  auto random = [&](int64_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = scale * normal(rng);
    return v;
  };
  const std::vector<float> q0 = random(T * q_stride, 2.f), k0 = random(T * kv_stride, 2.f),
                           v = random(T * kv_stride, 1.f);
  const std::vector<float> q_norm = random(dh, 1.f), k_norm = random(dh, 1.f);
  std::vector<float> freq(c.n_rot / 2);
  for (float& f : freq) f = 1.f + std::abs(normal(rng));
  std::vector<int32_t> positions(T);
  for (int32_t& p : positions) p = std::uniform_int_distribution<int32_t>(0, 70000)(rng);
  std::vector<int64_t> slots(total_slots);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(T);
  if (T > 1) slots[1] = -1;
  const size_t cache_bytes =
      static_cast<size_t>(total_slots * c.k_heads * kernels::KvVectorBytes(dtype, dh));

  struct Run {
    std::vector<float> q, k;
    std::vector<uint8_t> k_cache, v_cache;
    kernels::QkNormRopeCudaArgs rope;
    kernels::KvAppendArgs append;
  };
  auto prepare = [&](Run& r) {
    r.q = q0;
    r.k = k0;
    r.k_cache.assign(cache_bytes, 0xA5);
    r.v_cache.assign(cache_bytes, 0xA5);
    r.rope.q = r.q.data();
    r.rope.q_stride = q_stride;
    r.rope.q_heads = c.q_heads;
    r.rope.q_norm = q_norm.data();
    r.rope.k = r.k.data();
    r.rope.k_stride = kv_stride;
    r.rope.k_heads = c.k_heads;
    r.rope.k_norm = k_norm.data();
    r.rope.tokens = T;
    r.rope.head_dim = dh;
    r.rope.eps = 1e-5f;
    r.rope.positions = positions.data();
    r.rope.n_rot = c.n_rot;
    r.rope.base = 10000.f;
    r.rope.freq_factors = c.freq_factors ? freq.data() : nullptr;
    r.append.k = r.k.data();
    r.append.k_stride = kv_stride;
    r.append.v = v.data();
    r.append.v_stride = kv_stride;
    r.append.tokens = T;
    r.append.slots = slots.data();
    r.append.kv = kernels::PagedKv{.k = r.k_cache.data(),
                                   .v = r.v_cache.data(),
                                   .dtype = dtype,
                                   .num_blocks = num_blocks,
                                   .block_size = block_size,
                                   .kv_heads = c.k_heads,
                                   .head_dim = dh};
  };
  Run two, fused, ref;
  prepare(two);
  prepare(fused);
  bool ok = kernels::QkNormRopeCuda(two.rope, nullptr) == KernelStatus::kOk &&
            kernels::KvAppendCuda(two.append, nullptr) == KernelStatus::kOk &&
            kernels::QkNormRopeAppendCuda(fused.rope, fused.append, nullptr) == KernelStatus::kOk;
  // The CPU append of the two-kernel path's rotated k.
  prepare(ref);
  ref.k = two.k;
  ref.append.k = ref.k.data();
  ok = ok && kernels::KvAppendRef(ref.append) == KernelStatus::kOk;
  const bool same_q = two.q == fused.q, same_k = two.k == fused.k;
  const bool same_kc = two.k_cache == fused.k_cache, same_vc = two.v_cache == fused.v_cache;
  const bool ref_kc = two.k_cache == ref.k_cache, ref_vc = two.v_cache == ref.v_cache;
  int64_t written = 0;
  const int64_t row_bytes = c.k_heads * kernels::KvVectorBytes(dtype, dh);
  for (int64_t s = 0; s < total_slots; ++s) {
    written += !std::all_of(fused.v_cache.begin() + s * row_bytes,
                            fused.v_cache.begin() + (s + 1) * row_bytes,
                            [](uint8_t b) { return b == 0xA5; });
  }
  const int64_t expect_written = T > 1 ? T - 1 : T;
  ok = ok && same_q && same_k && same_kc && same_vc && ref_kc && ref_vc && written == expect_written;
  std::printf(
      "%s heads %ld/%ld dh %ld n_rot %ld tokens %ld ff %d dtype %d: q %d k %d k_cache %d v_cache %d "
      "(vs KvAppendRef %d %d) rows written %ld of %ld\n",
      ok ? "ok  " : "FAIL", long(c.q_heads), long(c.k_heads), long(dh), long(c.n_rot), long(T),
      int(c.freq_factors), int(dtype), same_q, same_k, same_kc, same_vc, ref_kc, ref_vc,
      long(written), long(expect_written));
  return ok;
}

int main() {
  const Case cases[] = {{96, 8, 128, 64, 1, false},
                        {64, 8, 128, 128, 3, true},
                        {12, 3, 64, 32, 5, true},
                        {5, 1, 256, 96, 2, false}};
  int fails = 0;
  uint32_t seed = 7;
  for (const Case& c : cases) {
    for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
      fails += !RunCase(c, dtype, seed++);
    }
  }
  std::printf("%d failures, %ld CTAs\n", fails, long(g_ctas));
  return fails != 0;
}
