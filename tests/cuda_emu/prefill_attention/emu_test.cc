// Runs the real prefill kernel source under the emulator against PagedAttentionRef.
#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "emu_cuda.h"
#include "kernels/attention/paged_attention_cuda.h"

cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
template <class T>
cudaError_t cudaFuncSetAttribute(T*, cudaFuncAttribute, int) {
  return cudaSuccess;
}
namespace stepserve::kernels {
inline void WaitForPrimaryGrid() {}
inline void AllowDependentLaunch() {}
template <class... KA, class... A>
cudaError_t LaunchWithPdl(void (*kernel)(KA...), dim3 grid, dim3 block, size_t smem, cudaStream_t,
                          A&&... args) {
  // 128 threads: one query head per CTA; 256: two sharing the K / V tiles.
  if ((block.x != 128 && block.x != 256) || smem > 110000) emu::Fail("launch shape");
  emu::RunGrid(grid, block, smem, [&] { kernel(args...); });
  return cudaSuccess;
}
}  // namespace stepserve::kernels

#include "kernel_emu.inc"

using namespace stepserve;
using kernels::KernelStatus;
using kernels::KvDtype;

struct SeqSpec {
  int64_t context, q_count;
};
struct Case {
  int64_t head_dim = 128, kv_heads = 1, group = 2, block_size = 16, window = 0;
  KvDtype dtype = KvDtype::kF32;
  std::vector<SeqSpec> seqs;
  int64_t q_pad = 0;
  float q_scale = 3.0f;
  int64_t min_rows = 16;
};

std::vector<float> RandomVector(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

bool RunCase(const Case& c, uint32_t seed, const char* name) {
  std::mt19937 rng(seed);
  const int64_t dh = c.head_dim, bs = c.block_size, heads = c.kv_heads * c.group;
  const int64_t width = heads * dh, stride = width + c.q_pad, width_kv = c.kv_heads * dh;
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
  const size_t cache_bytes =
      static_cast<size_t>(num_blocks * bs * c.kv_heads * kernels::KvVectorBytes(c.dtype, dh));
  // 16-byte aligned storage
  std::vector<float4> k_store(cache_bytes / 16 + 2), v_store(cache_bytes / 16 + 2);
  uint8_t* k_cache = reinterpret_cast<uint8_t*>(k_store.data());
  uint8_t* v_cache = reinterpret_cast<uint8_t*>(v_store.data());
  std::memset(k_cache, 0xFF, cache_bytes);
  std::memset(v_cache, 0xFF, cache_bytes);
  const kernels::PagedKv host_kv{k_cache, v_cache, c.dtype, num_blocks, bs, c.kv_heads, dh};
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
  if (kernels::KvAppendRef(append) != KernelStatus::kOk) return false;
  std::vector<int32_t> positions;
  std::vector<kernels::AttentionSeq> seqs;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const SeqSpec& spec = c.seqs[s];
    kernels::AttentionSeq seq;
    seq.q_begin = static_cast<int64_t>(positions.size());
    seq.q_count = spec.q_count;
    seq.context_len = spec.context;
    for (int64_t p = spec.context - spec.q_count; p < spec.context; ++p)
      positions.push_back(int32_t(p));
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
  if (kernels::PagedAttentionRef(host) != KernelStatus::kOk) return false;
  kernels::PagedAttentionCudaBatch batch;
  if (kernels::FlattenPagedAttentionBatch(host, &batch) != KernelStatus::kOk) return false;
  std::vector<kernels::PrefillTileCuda> tiles;
  const int64_t left_out = kernels::BuildPrefillTiles(batch, c.min_rows, &tiles);
  std::vector<bool> covered(rows, false);
  for (const auto& t : tiles)
    for (int32_t r = t.first_record; r < t.first_record + t.count; ++r)
      covered[batch.words[4 * r]] = true;
  std::vector<float> got(q.size(), std::numeric_limits<float>::quiet_NaN());
  kernels::PagedAttentionCudaArgs a;
  a.q = q.data();
  a.q_stride = stride;
  a.out = got.data();
  a.out_stride = stride;
  a.rows = reinterpret_cast<const kernels::PagedAttentionCudaRow*>(batch.words.data());
  a.n_rows = batch.n_rows;
  a.block_tables = batch.words.data() + batch.tables_offset;
  a.heads = heads;
  a.window = c.window;
  a.scale = host.scale;
  a.kv = host_kv;
  const int64_t ctas0 = emu::ctas;
  if (kernels::PrefillAttentionCuda(a, tiles.data(), int64_t(tiles.size()), nullptr) !=
      KernelStatus::kOk) {
    std::printf("launch failed\n");
    return false;
  }
  double diff = 0, norm = 0;
  int64_t nonfinite = 0, outside = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < stride; ++i) {
      const float x = got[r * stride + i];
      if (!covered[r] || i >= width) {
        outside += std::isnan(x) ? 0 : 1;
        continue;
      }
      if (!std::isfinite(x)) {
        ++nonfinite;
        continue;
      }
      const double w = want[r * stride + i];
      diff += (x - w) * (x - w);
      norm += w * w;
    }
  const double rel = std::sqrt(diff / std::max(norm, 1e-300));
  const bool ok = nonfinite == 0 && outside == 0 && rel <= 5e-3;
  std::printf(
      "%-4s %-60s rows %4lld left %3lld tiles %3zu ctas %5lld rel %.3g nonfinite %lld outside "
      "%lld\n",
      ok ? "ok" : "FAIL", name, (long long)rows, (long long)left_out, tiles.size(),
      (long long)(emu::ctas - ctas0), rel, (long long)nonfinite, (long long)outside);
  return ok;
}

int main(int argc, char** argv) {
  emu::smem_base = stepserve::kernels::EmuSmem();
  const int which = argc > 1 ? std::atoi(argv[1]) : 0;
  emu::copy_at_issue = argc > 2 && argv[2][0] == '1';
  int fails = 0, i = 0;
  const std::vector<std::vector<SeqSpec>> batches = {
      {{16, 16}, {63, 63}, {64, 64}, {65, 65}, {40, 1}},
      {{263, 63}, {129, 65}},
      {{200, 130}},
  };
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
    for (int64_t head_dim : {128, 192}) {
      for (int64_t window : {0, 512, 37}) {
        Case c;
        c.dtype = dtype;
        c.head_dim = head_dim;
        c.window = window;
        c.group = (i % 2) ? 3 : 2;
        c.kv_heads = 1 + (i % 3 == 1);
        c.block_size = (i / 2) % 2 == 0 ? 16 : 32;
        c.seqs = batches[i % 3];
        c.q_pad = i % 3 == 2 ? 8 : 0;
        char name[200];
        std::snprintf(name, sizeof name,
                      "dtype %d dh %lld group %lld kvh %lld window %lld block %lld batch %d",
                      int(dtype), (long long)head_dim, (long long)c.group, (long long)c.kv_heads,
                      (long long)window, (long long)c.block_size, i % 3);
        if (which == 0 || which == 1) fails += !RunCase(c, 1000 + i, name);
        ++i;
      }
    }
  }
  if (which == 0 || which == 2) {
    // longer: window 512 actually cutting; min_rows 1 (decode rows as 1-row tiles); sharp softmax
    Case c;
    c.seqs = {{700, 700}, {900, 200}, {50, 1}};
    c.window = 512;
    c.min_rows = 1;
    c.dtype = KvDtype::kF16;
    fails += !RunCase(c, 7, "long f16 w512 min_rows 1");
    c.window = 37;
    c.dtype = KvDtype::kQ8_0;
    c.head_dim = 192;
    c.q_scale = 6.0f;
    fails += !RunCase(c, 8, "long q8 192 w37 q6");
    c.window = 0;
    c.dtype = KvDtype::kF32;
    c.head_dim = 128;
    c.q_scale = 3.0f;
    c.seqs = {{700, 700}};
    fails += !RunCase(c, 9, "long f32 w0");
  }
  if (which == 3) {  // the exact cases of tests/gpu/prefill_attention_cuda_test.cc
    const std::vector<std::vector<SeqSpec>> gb = {
        {{16, 16}, {63, 63}, {64, 64}, {65, 65}, {40, 1}},
        {{263, 63}, {129, 65}},
        {{200, 200}},
    };
    int j = 0;
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
      for (int64_t head_dim : {128, 192}) {
        for (int64_t window : {0, 512, 37}) {
          Case c;
          c.dtype = dtype;
          c.head_dim = head_dim;
          c.window = window;
          c.kv_heads = 2;
          c.group = (j + j / 6) % 2 == 0 ? 8 : 12;
          c.block_size = (j / 2) % 2 == 0 ? 16 : 32;
          c.seqs = gb[j % 3];
          c.q_pad = j % 3 == 2 ? 8 : 0;
          char name[200];
          std::snprintf(name, sizeof name, "gtest shape %d group %lld", j, (long long)c.group);
          fails += !RunCase(c, 1000 + j, name);
          ++j;
        }
      }
    }
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
    j = 0;
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
      char name[200];
      std::snprintf(name, sizeof name, "gtest long %d", j);
      fails += !RunCase(c, 2000 + j++, name);
    }
  }
  std::printf("%d failures\n", fails);
  return fails != 0;
}
