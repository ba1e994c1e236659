// CPU kernel benchmark: one JSON object per line.
//   matmul: GB/s of weight bytes read for 4096x4096 Q4_K / IQ4_XS / Q8_0 at batch 1 and 8.
//   attention: microseconds per decode token (H=64, G=8, Dh=128, contexts 512 and 4096).
// Usage: bench_cpu_ops [threads]   (default: hardware concurrency)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/quant/quant.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/matmul/matmul.h"

namespace stepserve::kernels {
namespace {

template <typename F>
double SecondsPerCall(F&& f) {
  f();  // warm-up
  int iters = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    f();
    ++iters;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < 0.5 && iters < 1000);
  return elapsed / iters;
}

void BenchMatmul(ThreadPool& pool, GgmlType type, int64_t batch) {
  const int64_t n = 4096;
  const int64_t row_bytes = RowBytes(type, n);
  std::vector<uint8_t> w(row_bytes * n);
  if (!quant::FillRandomBlocks(type, w.data(), n * n / TypeInfo(type).block_elems, 1, 0.5f).ok()) {
    return;
  }
  std::vector<float> x(batch * n, 0.01f), y(batch * n);
  MatmulArgs a{type, w.data(), row_bytes, n, n, x.data(), n, batch, y.data(), n};
  const double s = SecondsPerCall([&] { (void)MatmulCpu(a, &pool); });
  std::printf(
      "{\"bench\":\"matmul_cpu\",\"type\":\"%s\",\"in\":%lld,\"out\":%lld,\"batch\":%lld,"
      "\"threads\":%d,\"ms\":%.3f,\"weight_gbps\":%.2f}\n",
      std::string(GgmlTypeName(type)).c_str(), static_cast<long long>(n), static_cast<long long>(n),
      static_cast<long long>(batch), pool.num_threads(), s * 1e3,
      static_cast<double>(w.size()) / s / 1e9);
}

void BenchAttention(ThreadPool& pool, int64_t context) {
  const int64_t heads = 64, kv_heads = 8, dh = 128, block = 16;
  const int64_t blocks = (context + block - 1) / block;
  std::vector<float> k(blocks * block * kv_heads * dh, 0.01f), v = k;
  std::vector<int32_t> table(blocks);
  for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(blocks - 1 - b);
  std::vector<float> q(heads * dh, 0.02f), out(heads * dh);
  int32_t pos = static_cast<int32_t>(context - 1);
  AttentionSeq seq{0, 1, context, table.data(), blocks};
  PagedAttentionArgs a;
  a.q = q.data();
  a.q_stride = heads * dh;
  a.out = out.data();
  a.out_stride = heads * dh;
  a.positions = &pos;
  a.seqs = &seq;
  a.n_seqs = 1;
  a.heads = heads;
  a.scale = 1.0f / std::sqrt(128.0f);
  a.kv = {k.data(), v.data(), KvDtype::kF32, blocks, block, kv_heads, dh};
  const double s = SecondsPerCall([&] { (void)PagedAttentionCpu(a, &pool); });
  const double kv_bytes = 2.0 * context * kv_heads * dh * 4;
  std::printf(
      "{\"bench\":\"attention_cpu_decode\",\"heads\":%lld,\"kv_heads\":%lld,\"head_dim\":%lld,"
      "\"context\":%lld,\"threads\":%d,\"us_per_token\":%.1f,\"kv_gbps\":%.2f}\n",
      static_cast<long long>(heads), static_cast<long long>(kv_heads), static_cast<long long>(dh),
      static_cast<long long>(context), pool.num_threads(), s * 1e6, kv_bytes / s / 1e9);
}

}  // namespace
}  // namespace stepserve::kernels

int main(int argc, char** argv) {
  stepserve::ThreadPool pool(argc > 1 ? std::atoi(argv[1]) : 0);
  for (auto type :
       {stepserve::GgmlType::kQ4_K, stepserve::GgmlType::kIQ4_XS, stepserve::GgmlType::kQ8_0}) {
    for (int64_t batch : {1, 8}) stepserve::kernels::BenchMatmul(pool, type, batch);
  }
  for (int64_t context : {512, 4096}) stepserve::kernels::BenchAttention(pool, context);
  return 0;
}
