// Runs the real decode attention source (PagedAttentionCuda: PagedAttentionKernel and its split-K
// combine, in the kernel's last CTA or in the combine kernels, with or without the head gate)
// under the emulator against PagedAttentionRef. Decode-shaped batches: one to four query rows per
// sequence at the end of contexts of 1-700 keys.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "emu_attention_case.h"
#include "emu_cuda.h"
#include "emu_launch.h"
// Static shared arrays: one instance for all the coroutine threads of a CTA (CTAs run one at a
// time), as on the device.
#undef __shared__
#define __shared__ static
#include "kernels/attention/paged_attention_cuda.h"

template <class T>
inline T __ldcg(const T* p) {
  return *p;
}
// The head gate's int8 rows (q8_quantize.cuh) are not emulated: these only make it compile, and
// the cases leave q8_natural null.
inline unsigned __shfl_down_sync(unsigned, unsigned v, unsigned, int) {
  emu::Fail("__shfl_down_sync (the gate's int8 rows) is not emulated");
  return v;
}
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
// Byte i of the result is byte (s >> 4i) & 7 of the pair {y, x} (x the low four bytes); used by
// the tensor-core kernel's F16 V fragments (and by the gate's int8 rows, not emulated).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t both = (uint64_t{y} << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i)
    r |= static_cast<unsigned>((both >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
}
constexpr size_t kEmuSmemBytes = 200000;  // the dynamic shared memory main() gives the emulator
// Up to emu::kMaxThreads threads in whole warps and at most kEmuSmemBytes of dynamic shared
// memory.
void emu::CheckLaunch(dim3, dim3 block, size_t smem) {
  if (block.x > emu::kMaxThreads || block.x % 32 != 0 || smem > kEmuSmemBytes) {
    emu::Fail("launch shape");
  }
}

#include "kernel_emu.inc"

using namespace stepserve;
using emu_attention::SeqSpec;
using kernels::KernelStatus;
using kernels::KvDtype;

struct DecodeCase : emu_attention::Case {
  int64_t splits = 1;
  bool fused_combine = false;
  bool gate = false;
};

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

bool RunCase(const DecodeCase& c, uint32_t seed, const char* name) {
  emu_attention::Built b;
  if (!b.Build(c, seed)) {
    std::printf("FAIL %s: the case does not build\n", name);
    return false;
  }
  std::mt19937 rng(seed + 17);
  const int64_t dh = c.head_dim;
  std::vector<float> gate;
  std::vector<float> want = b.want;
  if (c.gate) {
    gate = emu_attention::RandomVector(static_cast<size_t>(b.rows * b.heads), 3.0f, rng);
    for (int64_t r = 0; r < b.rows; ++r)
      for (int64_t h = 0; h < b.heads; ++h)
        for (int64_t d = 0; d < dh; ++d)
          want[r * b.stride + h * dh + d] *= Sigmoid(gate[r * b.heads + h]);
  }
  std::vector<float> got(b.q.size(), std::numeric_limits<float>::quiet_NaN());
  kernels::PagedAttentionCudaArgs a = b.CudaArgs(got.data());
  a.splits = c.splits;
  std::vector<float4> scratch;
  std::vector<int32_t> arrivals;
  if (c.splits > 1) {
    a.scratch_bytes = kernels::PagedAttentionCudaScratchBytes(a.n_rows, a.heads, dh, c.splits);
    scratch.assign(static_cast<size_t>(a.scratch_bytes) / 16 + 1, float4{});
    std::memset(scratch.data(), 0xFF, scratch.size() * sizeof(float4));  // NaN partials
    a.scratch = scratch.data();
    a.split_arrival_count = kernels::PagedAttentionCudaArrivalCount(a.n_rows, a.heads, c.kv_heads);
    arrivals.assign(static_cast<size_t>(a.split_arrival_count), 0);
    a.split_arrivals = arrivals.data();
  }
  if (c.gate) {
    a.gate = gate.data();
    a.gate_stride = b.heads;
  }
  kernels::SetPagedAttentionCudaFusedCombine(c.fused_combine);
  if (c.gate && !kernels::PagedAttentionCudaCombineGates(a)) {
    std::printf("FAIL %s: the combine does not take the gate here\n", name);
    return false;
  }
  const int64_t ctas0 = emu::ctas;
  const int64_t combines0 = kernels::PagedAttentionCudaCombineLaunches();
  const int64_t mma0 = kernels::PagedAttentionCudaMmaLaunches();
  if (kernels::PagedAttentionCuda(a, nullptr) != KernelStatus::kOk) {
    std::printf("FAIL %s: launch refused\n", name);
    return false;
  }
  const int64_t combines = kernels::PagedAttentionCudaCombineLaunches() - combines0;
  const int64_t mma = kernels::PagedAttentionCudaMmaLaunches() - mma0;
  // The tensor-core kernel wherever it is on and takes the case (not with the fused combine).
  const bool want_mma = kernels::PagedAttentionCudaMmaDecode() &&
                        kernels::PagedAttentionCudaMmaSupports(a) &&
                        !(c.fused_combine && c.splits > 1 && !c.gate);
  int64_t counters_left = 0;
  for (const int32_t n : arrivals) counters_left += n != 0;
  double diff = 0, norm = 0;
  int64_t nonfinite = 0, outside = 0;
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t i = 0; i < b.stride; ++i) {
      const float x = got[r * b.stride + i];
      if (i >= b.width) {  // the row's padding stays untouched
        outside += std::isnan(x) ? 0 : 1;
        continue;
      }
      if (!std::isfinite(x)) {
        ++nonfinite;
        continue;
      }
      const double w = want[r * b.stride + i];
      diff += (x - w) * (x - w);
      norm += w * w;
    }
  const double rel = std::sqrt(diff / std::max(norm, 1e-300));
  // One combine kernel exactly when the splits are not combined inside the attention kernel:
  // fused needs the switch and no gate.
  const bool want_combine = c.splits > 1 && (!c.fused_combine || c.gate);
  // F16 MMA inputs (Q, K, P, V rounded): errors of order 1e-3 (prefill_attention_cuda_test.cc
  // derives the bound); an indexing, masking or softmax error gives errors of order 1.
  const double bound = mma > 0 ? 4e-3 : 1e-5;
  const bool ok = nonfinite == 0 && outside == 0 && rel <= bound && counters_left == 0 &&
                  combines == (want_combine ? 1 : 0) && mma == (want_mma ? 1 : 0);
  std::printf(
      "%-4s %-66s rows %3lld ctas %5lld combines %lld mma %lld rel %.3g nonfinite %lld outside "
      "%lld counters %lld\n",
      ok ? "ok" : "FAIL", name, (long long)b.rows, (long long)(emu::ctas - ctas0),
      (long long)combines, (long long)mma, rel, (long long)nonfinite, (long long)outside,
      (long long)counters_left);
  return ok;
}

int main(int argc, char** argv) {
  static float4 smem[kEmuSmemBytes / 16];
  emu::smem_base = reinterpret_cast<uint8_t*>(smem);
  emu::shuffle_ctas = true;
  const int which = argc > 1 ? std::atoi(argv[1]) : 0;
  // "mma": the tensor-core decode kernel on, its head dims (128, 192) and groups (up to 16).
  const bool mma = argc > 2 && std::string(argv[2]) == "mma";
  kernels::SetPagedAttentionCudaMmaDecode(mma);
  const std::vector<std::vector<SeqSpec>> batches = {
      {{1, 1}},                     // the first token: one key
      {{256, 1}},                   // bench_model's decode context
      {{700, 1}, {33, 1}, {5, 1}},  // mixed lengths
      {{300, 4}, {64, 2}},          // several rows per sequence (speculative verification)
  };
  // Every knob drawn per case (not cycled with the loops, which would tie them together).
  int fails = 0, i = 0;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
    for (int64_t head_dim : mma ? std::vector<int64_t>{128, 192} : std::vector<int64_t>{128, 64}) {
      for (int64_t window : {0, 37}) {
        for (const auto& seqs : batches) {
          std::mt19937 pick(static_cast<uint32_t>(i) * 2654435761u + 1);
          auto one_of = [&pick](std::initializer_list<int64_t> values) {
            return *(values.begin() + pick() % values.size());
          };
          DecodeCase c;
          c.dtype = dtype;
          c.head_dim = head_dim;
          c.window = window;
          c.seqs = seqs;
          c.kv_heads = one_of({1, 2});
          // 20 heads: two passes of up to 16 (the MMA kernel: one pass, 16 at most).
          c.group = mma ? one_of({5, 8, 12, 16}) : one_of({8, 12, 20});
          c.block_size = one_of({16, 32});
          c.q_pad = one_of({0, 8});
          c.splits = one_of({1, 2, 5, 8, 16});
          c.fused_combine = one_of({0, 1}) == 1;
          c.gate = c.splits > 1 && one_of({0, 1}) == 1;
          char name[200];
          std::snprintf(name, sizeof name,
                        "dtype %d dh %lld window %lld kvh %lld group %lld bs %lld splits %lld%s%s",
                        int(dtype), (long long)head_dim, (long long)window, (long long)c.kv_heads,
                        (long long)c.group, (long long)c.block_size, (long long)c.splits,
                        c.fused_combine ? " fused" : "", c.gate ? " gate" : "");
          if (which == 0 || which == i % 4 + 1) fails += !RunCase(c, 3000 + i, name);
          ++i;
        }
      }
    }
  }
  std::printf("%d failures\n", fails);
  return fails != 0;
}
