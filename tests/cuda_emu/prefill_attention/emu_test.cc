// Runs the real prefill kernel source under the emulator against PagedAttentionRef.
#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "emu_attention_case.h"
#include "emu_cuda.h"
#include "emu_launch.h"
#include "kernels/attention/paged_attention_cuda.h"

// 128 threads: one query head per CTA; 256: two sharing the K / V tiles.
void emu::CheckLaunch(dim3, dim3 block, size_t smem) {
  if ((block.x != 128 && block.x != 256) || smem > 110000) emu::Fail("launch shape");
}

#include "kernel_emu.inc"

using namespace stepserve;
using kernels::KernelStatus;
using kernels::KvDtype;

using emu_attention::SeqSpec;
struct Case : emu_attention::Case {
  int64_t min_rows = 16;
};

bool RunCase(const Case& c, uint32_t seed, const char* name) {
  emu_attention::Built b;
  if (!b.Build(c, seed)) return false;
  const int64_t rows = b.rows, width = b.width, stride = b.stride;
  const kernels::PagedAttentionCudaBatch& batch = b.batch;
  const std::vector<float>& want = b.want;
  std::vector<kernels::PrefillTileCuda> tiles;
  const int64_t left_out = kernels::BuildPrefillTiles(batch, c.min_rows, &tiles);
  std::vector<bool> covered(rows, false);
  for (const auto& t : tiles)
    for (int32_t r = t.first_record; r < t.first_record + t.count; ++r)
      covered[batch.words[4 * r]] = true;
  std::vector<float> got(b.q.size(), std::numeric_limits<float>::quiet_NaN());
  const kernels::PagedAttentionCudaArgs a = b.CudaArgs(got.data());
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
