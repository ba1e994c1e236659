// HBM bandwidth (copy kernel, cudaMemcpy) and quantized GEMV throughput, one JSON object a line.
// GEMV weights rotate over enough copies (>= 1 GiB in all) that L2 (50 MB) cannot serve them; the
// launches are captured in a CUDA graph so launch gaps count as they would in a captured decode
// step; times are CUDA events, the median of several replays. Activation modes ("act"): "q8" is
// the whole default op (quantize X + int8 GEMV: two kernels, the second overlapping the first
// through programmatic dependent launch), "q8_pre" the GEMV alone on an already quantized X (an
// input shared by several matmuls is quantized once), "f32" the exact reference path.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "kernels/bandwidth/copy_cuda.h"
#include "kernels/common/cuda_check.h"
#include "kernels/matmul/matmul_cuda.h"

namespace stepserve::kernels {
namespace {

#define BENCH_CHECK(call)                                               \
  do {                                                                  \
    const cudaError_t err_ = (call);                                    \
    if (err_ != cudaSuccess) {                                          \
      std::fprintf(stderr, "%s\n", CudaErrorText(#call, err_).c_str()); \
      std::exit(1);                                                     \
    }                                                                   \
  } while (0)

// Median milliseconds per replay of `graph` (each replay runs `launches` launches).
double TimeGraph(cudaGraphExec_t graph, cudaStream_t stream, int replays) {
  cudaEvent_t start, stop;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  BENCH_CHECK(cudaGraphLaunch(graph, stream));  // warm-up
  BENCH_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int i = 0; i < replays; ++i) {
    BENCH_CHECK(cudaEventRecord(start, stream));
    BENCH_CHECK(cudaGraphLaunch(graph, stream));
    BENCH_CHECK(cudaEventRecord(stop, stream));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    BENCH_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

template <class F>
cudaGraphExec_t Capture(cudaStream_t stream, int launches, F&& launch) {
  cudaGraph_t graph;
  BENCH_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < launches; ++i) {
    if (!launch(i)) {
      std::fprintf(stderr, "launch %d failed during capture\n", i);
      std::exit(1);
    }
  }
  BENCH_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaGraphDestroy(graph);
  return exec;
}

double BenchCopy(cudaStream_t stream, bool use_kernel, int64_t bytes) {
  void *src, *dst;
  BENCH_CHECK(cudaMalloc(&src, bytes));
  BENCH_CHECK(cudaMalloc(&dst, bytes));
  BENCH_CHECK(cudaMemset(src, 0x5A, bytes));  // not zeros
  const int launches = 10;
  cudaGraphExec_t g = Capture(stream, launches, [&](int) {
    if (use_kernel) return CopyCuda(dst, src, bytes, 0, stream) == KernelStatus::kOk;
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess;
  });
  const double ms = TimeGraph(g, stream, 7) / launches;
  const double gbps = 2.0 * bytes / (ms * 1e-3) / 1e9;  // read + write
  std::printf(
      "{\"bench\":\"hbm_copy\",\"method\":\"%s\",\"bytes\":%lld,\"ms\":%.4f,\"gbps_rw\":%.1f}\n",
      use_kernel ? "kernel" : "cudaMemcpy", static_cast<long long>(bytes), ms, gbps);
  cudaGraphExecDestroy(g);
  cudaFree(src);
  cudaFree(dst);
  return gbps;
}

enum class Act { kQ8, kQ8Pre, kF32 };

const char* ActName(Act act) {
  return act == Act::kQ8 ? "q8" : (act == Act::kQ8Pre ? "q8_pre" : "f32");
}

void BenchGemv(cudaStream_t stream, GgmlType type, int64_t out, int64_t in, int64_t rows, Act act,
               double copy_gbps) {
  const int64_t row_bytes = (RowBytes(type, in) + 15) / 16 * 16;
  const int64_t w_bytes = row_bytes * out;
  const int copies = static_cast<int>(std::max<int64_t>(4, (int64_t{1} << 30) / w_bytes + 1));
  std::vector<uint8_t> host(w_bytes, 0);
  const int64_t nb = in / TypeInfo(type).block_elems;
  for (int64_t o = 0; o < out; ++o) {
    if (!quant::FillRandomBlocks(type, host.data() + o * row_bytes, nb, 1234 + o, 1.0f).ok()) {
      std::fprintf(stderr, "FillRandomBlocks failed\n");
      std::exit(1);
    }
  }
  uint8_t* w;
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&w), w_bytes * copies));
  BENCH_CHECK(cudaMemcpy(w, host.data(), w_bytes, cudaMemcpyHostToDevice));
  for (int c = 1; c < copies; ++c) {
    BENCH_CHECK(cudaMemcpy(w + c * w_bytes, w, w_bytes, cudaMemcpyDeviceToDevice));
  }
  std::vector<float> hx(rows * in);
  for (size_t i = 0; i < hx.size(); ++i) hx[i] = static_cast<float>((i * 2654435761u) % 1000) - 500;
  float *x, *y;
  void* scratch;
  const int64_t scratch_bytes = GemvCudaScratchBytes(in, rows);
  BENCH_CHECK(cudaMalloc(&scratch, scratch_bytes));
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&x), hx.size() * 4));
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&y), rows * out * 4));
  BENCH_CHECK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
  const int launches = 2 * copies;
  auto args = [&](int i) {
    return GemvCudaArgs{
        .type = type,
        .w = w + (i % copies) * w_bytes,
        .w_row_bytes = row_bytes,
        .in = in,
        .out = out,
        .x = x,
        .x_stride = in,
        .rows = rows,
        .y = y,
        .y_stride = out,
        .activations = act == Act::kF32 ? GemvCudaActivations::kF32 : GemvCudaActivations::kQ8,
        .scratch = scratch,
        .scratch_bytes = scratch_bytes,
        .x_prequantized = act == Act::kQ8Pre};
  };
  if (act == Act::kQ8Pre) {  // quantize X once, outside the timed graph
    GemvCudaArgs a = args(0);
    a.x_prequantized = false;
    if (GemvCuda(a, stream) != KernelStatus::kOk) std::exit(1);
    BENCH_CHECK(cudaStreamSynchronize(stream));
  }
  cudaGraphExec_t g = Capture(
      stream, launches, [&](int i) { return GemvCuda(args(i), stream) == KernelStatus::kOk; });
  const double ms = TimeGraph(g, stream, 9) / launches;
  const double bytes = static_cast<double>(w_bytes) + rows * (in + out) * 4.0;
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  std::printf(
      "{\"bench\":\"gemv\",\"act\":\"%s\",\"type\":\"%s\",\"out\":%lld,\"in\":%lld,\"rows\":%lld,"
      "\"weight_bytes\":%lld,\"copies\":%d,\"us\":%.3f,\"gbps\":%.1f,\"fraction_of_copy\":%.3f}\n",
      ActName(act), std::string(GgmlTypeName(type)).c_str(), static_cast<long long>(out),
      static_cast<long long>(in), static_cast<long long>(rows), static_cast<long long>(w_bytes),
      copies, ms * 1e3, gbps, gbps / copy_gbps);
  std::fflush(stdout);
  cudaGraphExecDestroy(g);
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
  cudaFree(scratch);
}

// --quick: IQ4_XS and Q8_0 4096x12288, rows 1, q8 (for profiling under ncu).
int Main(bool quick) {
  if (CudaDeviceCount() == 0) {
    std::fprintf(stderr, "bench_gemv: no CUDA device visible\n");
    return 1;
  }
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"bench\":\"device\",\"name\":\"%s\",\"sms\":%d,\"l2_bytes\":%d}\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize);
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int64_t copy_bytes = int64_t{2} << 30;
  const double kernel_gbps = quick ? 1.0 : BenchCopy(stream, true, copy_bytes);
  if (quick) {
    BenchGemv(stream, GgmlType::kIQ4_XS, 4096, 12288, 1, Act::kQ8, kernel_gbps);
    BenchGemv(stream, GgmlType::kQ8_0, 4096, 12288, 1, Act::kQ8, kernel_gbps);
    return 0;
  }
  BenchCopy(stream, false, copy_bytes);
  for (GgmlType type : {GgmlType::kIQ4_XS, GgmlType::kQ4_K, GgmlType::kQ8_0, GgmlType::kQ6_K}) {
    for (Act act : {Act::kQ8, Act::kQ8Pre, Act::kF32}) {
      for (int64_t rows : {1, 4, 8, 16}) {
        if (act == Act::kF32 && rows == 4) continue;
        BenchGemv(stream, type, 4096, 12288, rows, act, kernel_gbps);
        BenchGemv(stream, type, 12288, 4096, rows, act, kernel_gbps);
      }
    }
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace stepserve::kernels

int main(int argc, char** argv) {
  return stepserve::kernels::Main(argc > 1 && std::string(argv[1]) == "--quick");
}
