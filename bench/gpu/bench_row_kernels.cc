// Decode-shape micro-benchmark of the per-row CUDA kernels (batch 1, 4, 16 rows): RmsNormCuda on
// 4096-float rows, QkNormRopeCuda on 96 q + 8 kv heads of 128 dims (64 rotated), RouterCuda on
// 288 experts top-8, and GemvGenericCuda on F32 4096 -> 288 and Q5_K 4096 -> 1024. One JSON object
// a line: microseconds per call (CUDA events around a captured graph of many launches, the median
// of several replays, so launch gaps count as in a captured decode step) and GB/s where bytes
// matter. GEMV weights rotate over enough copies (> 200 MB) that L2 cannot serve them.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/gpu/cuda_bench_util.h"
#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "kernels/common/cuda_check.h"
#include "kernels/matmul/gemm_cuda.h"
#include "kernels/moe/router_cuda.h"
#include "kernels/rms_norm/rms_norm_cuda.h"
#include "kernels/rope/rope_cuda.h"
#include "kernels/sampling/logits_topk_cuda.h"

namespace stepserve::kernels {
namespace {

constexpr int kLaunches = 200;  // per captured graph
constexpr int kReplays = 9;

// Device buffer of `n` floats filled with a deterministic pattern in [-1, 1).
float* DeviceFloats(int64_t n, uint32_t seed) {
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t h = (static_cast<uint32_t>(i) + seed) * 2654435761u;
    host[i] = static_cast<float>(h % 2000) / 1000.0f - 1.0f;
  }
  float* d;
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)));
  BENCH_CHECK(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

// Microseconds per launch: `launch(i)` (i = 0 .. kLaunches-1) is captured into one graph, which
// is replayed kReplays times; the median replay counts.
template <class F>
double MicrosPerLaunch(cudaStream_t stream, F&& launch) {
  // One launch outside the capture first: some kernels set up per-device state on first use
  // (the dequantization tables), which synchronizes and is not allowed while capturing.
  if (launch(0) != KernelStatus::kOk) {
    std::fprintf(stderr, "warm-up launch failed\n");
    std::exit(1);
  }
  BENCH_CHECK(cudaStreamSynchronize(stream));
  cudaGraphExec_t exec =
      bench::CaptureGraph(stream, kLaunches, [&](int i) { return launch(i) == KernelStatus::kOk; });
  const double ms = bench::GraphMedianMs(exec, stream, kReplays);
  cudaGraphExecDestroy(exec);
  return ms * 1e3 / kLaunches;
}

void Print(const char* kernel, const char* shape, int64_t rows, double us, double bytes) {
  if (bytes > 0) {
    std::printf(
        "{\"bench\":\"row_kernels\",\"kernel\":\"%s\",\"shape\":\"%s\",\"rows\":%lld,"
        "\"us\":%.3f,\"gbps\":%.1f}\n",
        kernel, shape, static_cast<long long>(rows), us, bytes / (us * 1e-6) / 1e9);
  } else {
    std::printf(
        "{\"bench\":\"row_kernels\",\"kernel\":\"%s\",\"shape\":\"%s\",\"rows\":%lld,"
        "\"us\":%.3f}\n",
        kernel, shape, static_cast<long long>(rows), us);
  }
  std::fflush(stdout);
}

void BenchRmsNorm(cudaStream_t stream, int64_t rows) {
  constexpr int64_t kN = 4096;
  float* x = DeviceFloats(rows * kN, 1);
  float* y = DeviceFloats(rows * kN, 2);
  float* weight = DeviceFloats(kN, 3);
  const RmsNormArgs args{.x = x,
                         .x_stride = kN,
                         .y = y,
                         .y_stride = kN,
                         .rows = rows,
                         .heads = 1,
                         .n = kN,
                         .weight = weight,
                         .eps = 1e-5f};
  const double us = MicrosPerLaunch(stream, [&](int) { return RmsNormCuda(args, stream); });
  Print("rms_norm", "4096", rows, us, (2.0 * rows * kN + kN) * sizeof(float));
  cudaFree(x);
  cudaFree(y);
  cudaFree(weight);
}

void BenchQkNormRope(cudaStream_t stream, int64_t tokens) {
  constexpr int64_t kHeadDim = 128, kQHeads = 96, kKHeads = 8, kNRot = 64;
  float* q = DeviceFloats(tokens * kQHeads * kHeadDim, 4);
  float* k = DeviceFloats(tokens * kKHeads * kHeadDim, 5);
  float* q_norm = DeviceFloats(kHeadDim, 6);
  float* k_norm = DeviceFloats(kHeadDim, 7);
  std::vector<int32_t> host_pos(tokens);
  for (int64_t t = 0; t < tokens; ++t) host_pos[t] = static_cast<int32_t>(1000 + t);
  int32_t* positions;
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&positions), tokens * sizeof(int32_t)));
  BENCH_CHECK(
      cudaMemcpy(positions, host_pos.data(), tokens * sizeof(int32_t), cudaMemcpyHostToDevice));
  QkNormRopeCudaArgs args;
  args.q = q;
  args.q_stride = kQHeads * kHeadDim;
  args.q_heads = kQHeads;
  args.q_norm = q_norm;
  args.k = k;
  args.k_stride = kKHeads * kHeadDim;
  args.k_heads = kKHeads;
  args.k_norm = k_norm;
  args.tokens = tokens;
  args.head_dim = kHeadDim;
  args.eps = 1e-5f;
  args.positions = positions;
  args.n_rot = kNRot;
  args.base = 10000.0f;
  // In place, so repeated launches keep renormalising the same (bounded) values.
  const double us = MicrosPerLaunch(stream, [&](int) { return QkNormRopeCuda(args, stream); });
  Print("qk_norm_rope", "q96+k8x128,rot64", tokens, us,
        2.0 * tokens * (kQHeads + kKHeads) * kHeadDim * sizeof(float));
  cudaFree(q);
  cudaFree(k);
  cudaFree(q_norm);
  cudaFree(k_norm);
  cudaFree(positions);
}

void BenchRouter(cudaStream_t stream, int64_t rows) {
  constexpr int64_t kExperts = 288, kTopK = 8;
  float* logits = DeviceFloats(rows * kExperts, 8);
  float* bias = DeviceFloats(kExperts, 9);
  int32_t* ids;
  float* weights;
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&ids), rows * kTopK * sizeof(int32_t)));
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&weights), rows * kTopK * sizeof(float)));
  RouterArgs args;
  args.logits = logits;
  args.logits_stride = kExperts;
  args.rows = rows;
  args.n_experts = kExperts;
  args.bias = bias;
  args.top_k = kTopK;
  args.gating = GatingFunc::kSigmoid;
  args.normalize = true;
  args.scale = 2.5f;
  args.ids = ids;
  args.weights = weights;
  const double us = MicrosPerLaunch(stream, [&](int) { return RouterCuda(args, stream); });
  Print("router", "288,top8,sigmoid", rows, us, 0);
  cudaFree(logits);
  cudaFree(bias);
  cudaFree(ids);
  cudaFree(weights);
}

void BenchGemvGeneric(cudaStream_t stream, GgmlType type, int64_t in, int64_t out, int64_t rows,
                      const char* shape) {
  int64_t row_bytes = 0, w_bytes = 0;
  int copies = 0;
  uint8_t* w = bench::DeviceWeightCopies(type, in, out, int64_t{200} << 20, 77, &row_bytes,
                                         &w_bytes, &copies);
  float* x = DeviceFloats(rows * in, 10);
  float* y = DeviceFloats(rows * out, 11);
  const double us = MicrosPerLaunch(stream, [&](int i) {
    MatmulCudaArgs args;
    args.type = type;
    args.w = w + (i % copies) * w_bytes;
    args.w_row_bytes = row_bytes;
    args.in = in;
    args.out = out;
    args.x = x;
    args.x_stride = in;
    args.rows = rows;
    args.y = y;
    args.y_stride = out;
    return GemvGenericCuda(args, stream);
  });
  Print("gemv_generic", shape, rows, us,
        static_cast<double>(w_bytes) + (rows * in + rows * out) * sizeof(float));
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
}

// LogitsTopK over a Step-3.5-Flash logits matrix (vocab 128896): argmax only (k = 1, no top-k
// outputs) and top-40 / top-256 with all outputs.
void BenchLogitsTopK(cudaStream_t stream, int64_t rows) {
  constexpr int64_t kVocab = 128896;
  float* logits = DeviceFloats(rows * kVocab, 12);
  for (const int32_t k : {1, 40, 256}) {
    int32_t *ids, *argmax;
    float *values, *lse;
    void* scratch;
    const size_t scratch_bytes = LogitsTopKCudaScratchBytes(rows, kVocab, k);
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&ids), rows * k * sizeof(int32_t)));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&values), rows * k * sizeof(float)));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&argmax), rows * sizeof(int32_t)));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&lse), rows * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&scratch, std::max<size_t>(scratch_bytes, 16)));
    LogitsTopKArgs a;
    a.logits = logits;
    a.rows = rows;
    a.vocab = kVocab;
    a.row_stride = kVocab;
    a.k = k;
    a.argmax = argmax;
    a.log_sum_exp = lse;
    if (k > 1) {
      a.top_ids = ids;
      a.top_logits = values;
    }
    const double us = MicrosPerLaunch(
        stream, [&](int) { return LogitsTopKCuda(a, scratch, scratch_bytes, stream); });
    const std::string shape = "vocab 128896, k " + std::to_string(k);
    Print("logits_topk", shape.c_str(), rows, us, static_cast<double>(rows * kVocab) * 4);
    cudaFree(ids);
    cudaFree(values);
    cudaFree(argmax);
    cudaFree(lse);
    cudaFree(scratch);
  }
  cudaFree(logits);
}

int Main() {
  if (CudaDeviceCount() == 0) {
    std::fprintf(stderr, "bench_row_kernels: no CUDA device\n");
    return 1;
  }
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const int64_t rows : {1, 4, 16}) {
    BenchRmsNorm(stream, rows);
    BenchQkNormRope(stream, rows);
    BenchRouter(stream, rows);
    BenchGemvGeneric(stream, GgmlType::kF32, 4096, 288, rows, "f32,4096->288");
    BenchGemvGeneric(stream, GgmlType::kQ5_K, 4096, 1024, rows, "q5_k,4096->1024");
  }
  for (const int64_t rows : {1, 4, 16, 64}) BenchLogitsTopK(stream, rows);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace stepserve::kernels

int main() { return stepserve::kernels::Main(); }
