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
#include "emu_launch.h"
// Static shared arrays: one instance for all the coroutine threads of a CTA (CTAs run one at a
// time), as on the device.
#undef __shared__
#define __shared__ static
#include "kernels/attention/kv_append_rope_cuda.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/rope/rope_cuda.h"
#include "tests/gpu/rope_append_case.h"

// The explicitly rounded intrinsics the kernels spell their arithmetic with, as plain host
// arithmetic (rounded to nearest the same way; -std=c++20 does not contract into fused
// multiply-adds).
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
void emu::CheckLaunch(dim3, dim3, size_t smem) {
  if (smem != 0) emu::Fail("launch shape");  // static shared arrays only
}

#include "kernel_emu.inc"

using namespace stepserve;
using kernels::KernelStatus;
using kernels::KvDtype;

using kernels::testing::RopeAppendCase;
using kernels::testing::RopeAppendInputs;

bool RunCase(const RopeAppendCase& c, KvDtype dtype, uint32_t seed) {
  const RopeAppendInputs in = kernels::testing::MakeRopeAppendInputs(c, seed);
  const size_t cache_bytes = in.cache_bytes(dtype);
  struct Run {
    std::vector<float> q, k;
    std::vector<uint8_t> k_cache, v_cache;
    kernels::QkNormRopeCudaArgs rope;
    kernels::KvAppendArgs append;
  };
  auto prepare = [&](Run& r) {
    r.q = in.q;
    r.k = in.k;
    r.k_cache.assign(cache_bytes, 0xA5);
    r.v_cache.assign(cache_bytes, 0xA5);
    kernels::testing::RopeAppendArgs(in, dtype,
                                     {.q = r.q.data(),
                                      .k = r.k.data(),
                                      .v = in.v.data(),
                                      .k_cache = r.k_cache.data(),
                                      .v_cache = r.v_cache.data(),
                                      .q_norm = in.q_norm.data(),
                                      .k_norm = in.k_norm.data(),
                                      .freq = in.freq.data(),
                                      .positions = in.positions.data(),
                                      .slots = in.slots.data()},
                                     &r.rope, &r.append);
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
  const int64_t row_bytes = in.cache_row_bytes(dtype);
  for (int64_t s = 0; s < in.total_slots(); ++s) {
    written += !std::all_of(fused.v_cache.begin() + s * row_bytes,
                            fused.v_cache.begin() + (s + 1) * row_bytes,
                            [](uint8_t b) { return b == 0xA5; });
  }
  ok = ok && same_q && same_k && same_kc && same_vc && ref_kc && ref_vc &&
       written == in.cached_rows();
  std::printf(
      "%s heads %ld/%ld dh %ld n_rot %ld tokens %ld ff %d dtype %d: q %d k %d k_cache %d v_cache "
      "%d "
      "(vs KvAppendRef %d %d) rows written %ld of %ld\n",
      ok ? "ok  " : "FAIL", long(c.q_heads), long(c.k_heads), long(c.head_dim), long(c.n_rot),
      long(c.tokens), int(c.freq_factors), int(dtype), same_q, same_k, same_kc, same_vc, ref_kc,
      ref_vc, long(written), long(in.cached_rows()));
  return ok;
}

int main() {
  int fails = 0;
  uint32_t seed = 7;
  for (const RopeAppendCase& c : kernels::testing::kRopeAppendCases) {
    for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
      fails += !RunCase(c, dtype, seed++);
    }
  }
  std::printf("%d failures, %ld CTAs\n", fails, long(emu::ctas));
  return fails != 0;
}
