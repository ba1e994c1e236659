// Runs the real decode attention source with its own q / k norm + RoPE and KV append
// (PagedAttentionCudaArgs::rope, PagedAttentionKernel<..., kRope = true>) under the emulator
// against what it replaces, the real QkNormRopeAppendCuda (rope_tu.cc) then PagedAttentionCuda:
// the outputs bit for bit, the K / V pages byte for byte, q and k left unrotated. Plain decode
// batches (one row per sequence at the end of contexts of 1-700 keys), F32 / F16 pages.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "emu_attention_case.h"
#include "emu_decode_unit.h"
#include "kernel_emu.inc"
#include "kernels/attention/kv_append_rope_cuda.h"

using namespace stepserve;
using emu_attention::SeqSpec;
using kernels::KernelStatus;
using kernels::KvDtype;

struct RopeCase : emu_attention::Case {
  int64_t splits = 1, n_rot = 128;
  bool freq = false;
  int cta_heads = 0;
};

// One path's writable state: q, k, the pages and the output.
struct PathState {
  std::vector<float> q, k, out;
  std::vector<float4> k_store, v_store;
};

bool RunCase(const RopeCase& c, uint32_t seed, const char* name) {
  emu_attention::Built b;
  if (!b.Build(c, seed)) {
    std::printf("FAIL %s: the case does not build\n", name);
    return false;
  }
  std::mt19937 rng(seed + 29);
  const int64_t dh = c.head_dim, kv_width = c.kv_heads * dh, kv_stride = kv_width + 4;
  const std::vector<float> k = emu_attention::RandomVector(b.rows * kv_stride, 2.0f, rng);
  const std::vector<float> v = emu_attention::RandomVector(b.rows * kv_stride, 1.0f, rng);
  const std::vector<float> q_norm = emu_attention::RandomVector(dh, 1.0f, rng);
  const std::vector<float> k_norm = emu_attention::RandomVector(dh, 1.0f, rng);
  std::vector<float> freq = emu_attention::RandomVector(c.n_rot / 2, 0.5f, rng);
  for (float& f : freq) f += 1.5f;
  std::vector<int64_t> slots;
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const int64_t p = b.seqs[s].context_len - 1;
    slots.push_back(int64_t{b.tables[s][p / c.block_size]} * c.block_size + p % c.block_size);
  }
  PathState two, one;
  for (PathState* st : {&two, &one}) {
    st->q = b.q;
    st->k = k;
    st->out.assign(b.q.size(), std::numeric_limits<float>::quiet_NaN());
    st->k_store = b.k_store;
    st->v_store = b.v_store;
  }
  kernels::SetPagedAttentionCudaCtaHeads(c.cta_heads);
  auto attention_args = [&](PathState& st) {
    kernels::PagedAttentionCudaArgs a = b.CudaArgs(st.out.data());
    a.q = st.q.data();
    a.kv.k = st.k_store.data();
    a.kv.v = st.v_store.data();
    a.splits = c.splits;
    a.sm_count = 132;
    return a;
  };
  std::vector<float4> scratch_two, scratch_one;
  auto scratch = [&](kernels::PagedAttentionCudaArgs& a, std::vector<float4>& area) {
    if (c.splits <= 1) return;
    a.scratch_bytes = kernels::PagedAttentionCudaScratchBytes(a.n_rows, a.heads, dh, c.splits);
    area.assign(static_cast<size_t>(a.scratch_bytes) / 16 + 1, float4{});
    a.scratch = area.data();
  };
  // The two kernels.
  kernels::QkNormRopeCudaArgs rope;
  rope.q = two.q.data();
  rope.q_stride = b.stride;
  rope.q_heads = b.heads;
  rope.q_norm = q_norm.data();
  rope.k = two.k.data();
  rope.k_stride = kv_stride;
  rope.k_heads = c.kv_heads;
  rope.k_norm = k_norm.data();
  rope.tokens = b.rows;
  rope.head_dim = dh;
  rope.eps = 1e-5f;
  rope.positions = b.positions.data();
  rope.n_rot = c.n_rot;
  rope.base = 10000.0f;
  rope.freq_factors = c.freq ? freq.data() : nullptr;
  kernels::KvAppendArgs append;
  append.k = rope.k;
  append.k_stride = kv_stride;
  append.v = v.data();
  append.v_stride = kv_stride;
  append.tokens = b.rows;
  append.slots = slots.data();
  append.kv = b.kv;
  append.kv.k = two.k_store.data();
  append.kv.v = two.v_store.data();
  if (kernels::QkNormRopeAppendCuda(rope, append, nullptr) != KernelStatus::kOk) {
    std::printf("FAIL %s: the rope-and-append launch refused\n", name);
    return false;
  }
  kernels::PagedAttentionCudaArgs a_two = attention_args(two);
  scratch(a_two, scratch_two);
  if (kernels::PagedAttentionCuda(a_two, nullptr) != KernelStatus::kOk) {
    std::printf("FAIL %s: the plain attention launch refused\n", name);
    return false;
  }
  // The attention's own.
  kernels::PagedAttentionCudaRope own;
  own.k = one.k.data();
  own.k_stride = kv_stride;
  own.v = v.data();
  own.v_stride = kv_stride;
  own.q_norm = q_norm.data();
  own.k_norm = k_norm.data();
  own.freq_factors = rope.freq_factors;
  own.eps = rope.eps;
  own.n_rot = c.n_rot;
  own.base = rope.base;
  kernels::PagedAttentionCudaArgs a_one = attention_args(one);
  scratch(a_one, scratch_one);
  a_one.rope = &own;
  if (!kernels::PagedAttentionCudaRopeApplies(a_one) ||
      kernels::PagedAttentionCuda(a_one, nullptr) != KernelStatus::kOk) {
    std::printf("FAIL %s: the rope attention launch refused\n", name);
    return false;
  }
  kernels::SetPagedAttentionCudaCtaHeads(0);
  auto same_bytes = [](const auto& x, const auto& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
  };
  const bool out_same = same_bytes(two.out, one.out);
  const bool k_same = same_bytes(two.k_store, one.k_store);
  const bool v_same = same_bytes(two.v_store, one.v_store);
  const bool q_kept = same_bytes(one.q, b.q) && same_bytes(one.k, k);
  int64_t nonfinite = 0;
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t i = 0; i < b.width; ++i) nonfinite += !std::isfinite(one.out[r * b.stride + i]);
  // The two-kernel path against the reference on its own rotated q and refreshed pages.
  const bool ok = out_same && k_same && v_same && q_kept && nonfinite == 0;
  std::printf("%-4s %-72s out %d k %d v %d q/k kept %d nonfinite %lld\n", ok ? "ok" : "FAIL", name,
              out_same, k_same, v_same, q_kept, (long long)nonfinite);
  return ok;
}

int main() {
  static float4 smem[kEmuSmemBytes / 16];
  emu::smem_base = reinterpret_cast<uint8_t*>(smem);
  emu::shuffle_ctas = true;
  const std::vector<std::vector<SeqSpec>> batches = {
      {{1, 1}},                     // the first token: one key
      {{256, 1}},                   // bench_model's decode context
      {{700, 1}, {33, 1}, {5, 1}},  // mixed lengths; the new key in a later chunk of its split
      {{100, 1}, {64, 1}},
  };
  int fails = 0, i = 0;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16}) {
    for (int64_t window : {0, 37}) {
      for (const auto& seqs : batches) {
        for (int rep = 0; rep < 2; ++rep) {
          std::mt19937 pick(static_cast<uint32_t>(i) * 2654435761u + 7);
          auto one_of = [&pick](std::initializer_list<int64_t> values) {
            return *(values.begin() + pick() % values.size());
          };
          RopeCase c;
          c.dtype = dtype;
          c.head_dim = 128;
          c.window = window;
          c.seqs = seqs;
          c.kv_heads = one_of({1, 2});
          c.group = one_of({8, 12, 20});  // 20 heads: two passes, the second does not write
          c.block_size = one_of({16, 32});
          c.q_pad = one_of({0, 8});
          c.splits = one_of({1, 2, 5, 8});
          c.n_rot = one_of({128, 64});
          c.freq = one_of({0, 1}) == 1;
          c.cta_heads = static_cast<int>(one_of({0, 4, 8}));
          char name[220];
          std::snprintf(name, sizeof name,
                        "dtype %d window %lld kvh %lld group %lld bs %lld splits %lld rot %lld%s "
                        "cta %d",
                        int(dtype), (long long)window, (long long)c.kv_heads, (long long)c.group,
                        (long long)c.block_size, (long long)c.splits, (long long)c.n_rot,
                        c.freq ? " ff" : "", c.cta_heads);
          fails += !RunCase(c, 5000 + i, name);
          ++i;
        }
      }
    }
  }
  std::printf("%d failures\n", fails);
  return fails != 0;
}
