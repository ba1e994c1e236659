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

#include "bench/gpu/cuda_bench_util.h"
#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "kernels/bandwidth/copy_cuda.h"
#include "kernels/common/cuda_check.h"
#include "kernels/matmul/matmul_cuda.h"

namespace stepserve::kernels {
namespace {

using bench::CaptureGraph;
using bench::DeviceWeightCopies;
using bench::GraphMedianMs;

double BenchCopy(cudaStream_t stream, bool use_kernel, int64_t bytes) {
  const double gbps = bench::CopyBandwidth(stream, bytes, use_kernel) / 1e9;  // read + write
  const double ms = 2.0 * bytes / (gbps * 1e9) * 1e3;
  std::printf(
      "{\"bench\":\"hbm_copy\",\"method\":\"%s\",\"bytes\":%lld,\"ms\":%.4f,\"gbps_rw\":%.1f}\n",
      use_kernel ? "kernel" : "cudaMemcpy", static_cast<long long>(bytes), ms, gbps);
  return gbps;
}

enum class Act { kQ8, kQ8Pre, kF32 };

const char* ActName(Act act) {
  return act == Act::kQ8 ? "q8" : (act == Act::kQ8Pre ? "q8_pre" : "f32");
}

// l2_resident: every launch reads copy 0, so after the first replay the weights come from L2
// (50 MB) when they fit: what an L2 prefetch of a matrix ahead of its GEMV could buy at most.
void BenchGemv(cudaStream_t stream, GgmlType type, int64_t out, int64_t in, int64_t rows, Act act,
               double copy_gbps, bool l2_resident = false) {
  int64_t row_bytes = 0, w_bytes = 0;
  int copies = 0;
  uint8_t* w =
      DeviceWeightCopies(type, in, out, int64_t{1} << 30, 1234, &row_bytes, &w_bytes, &copies);
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
  const int rotation = l2_resident ? 1 : copies;
  auto args = [&](int i) {
    return GemvCudaArgs{
        .type = type,
        .w = w + (i % rotation) * w_bytes,
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
  cudaGraphExec_t g = CaptureGraph(
      stream, launches, [&](int i) { return GemvCuda(args(i), stream) == KernelStatus::kOk; });
  const double ms = GraphMedianMs(g, stream, 9) / launches;
  // The same weight bytes through a kernel that only reads them, same rotation, same graph: the
  // ceiling for one launch of this size (ramp-up and tail included), as opposed to the copy
  // bandwidth of a 2 GiB stream.
  uint32_t* sink;
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&sink), 4));
  cudaGraphExec_t read_graph = CaptureGraph(stream, launches, [&](int i) {
    return ReadCuda(w + (i % rotation) * w_bytes, w_bytes, sink, stream) == KernelStatus::kOk;
  });
  const double read_ms = GraphMedianMs(read_graph, stream, 9) / launches;
  cudaGraphExecDestroy(read_graph);
  cudaFree(sink);
  const double bytes = static_cast<double>(w_bytes) + rows * (in + out) * 4.0;
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  std::printf(
      "{\"bench\":\"gemv\",\"act\":\"%s\",\"type\":\"%s\",\"out\":%lld,\"in\":%lld,\"rows\":%lld,"
      "\"weight_bytes\":%lld,\"copies\":%d,\"l2_resident\":%s,\"us\":%.3f,\"gbps\":%.1f,"
      "\"fraction_of_copy\":%.3f,\"read_only_us\":%.3f,\"fraction_of_read_only\":%.3f}\n",
      ActName(act), std::string(GgmlTypeName(type)).c_str(), static_cast<long long>(out),
      static_cast<long long>(in), static_cast<long long>(rows), static_cast<long long>(w_bytes),
      copies, l2_resident ? "true" : "false", ms * 1e3, gbps, gbps / copy_gbps, read_ms * 1e3,
      read_ms / ms);
  std::fflush(stdout);
  cudaGraphExecDestroy(g);
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
  cudaFree(scratch);
}

// --quick: every int8-path type, 4096x12288 and 12288x4096, one row (decode), int8 activations.
// --l2: see below. --rows: IQ4_XS and Q4_K at 1, 2, 4, 8, 12 and 16 activation rows (the
// tensor-core and dp4a multi-row kernels), int8 activations quantized in the call.
int Main(const std::string& mode) {
  const bool quick = mode == "--quick";
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
  const double kernel_gbps = BenchCopy(stream, true, copy_bytes);  // every fraction needs it
  if (quick) {
    for (GgmlType type :
         {GgmlType::kIQ4_XS, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_0}) {
      BenchGemv(stream, type, 4096, 12288, 1, Act::kQ8, kernel_gbps);
      BenchGemv(stream, type, 12288, 4096, 1, Act::kQ8, kernel_gbps);
    }
    return 0;
  }
  // --l2: the one-row IQ4_XS and Q4_K GEMVs with their weights rotated through HBM and read from
  // L2 (one copy), to size an L2 prefetch of the next matrix during the kernels before it.
  if (mode == "--l2") {
    for (GgmlType type : {GgmlType::kIQ4_XS, GgmlType::kQ4_K}) {
      for (bool l2 : {false, true}) {
        BenchGemv(stream, type, 4096, 12288, 1, Act::kQ8Pre, kernel_gbps, l2);
        BenchGemv(stream, type, 12288, 4096, 1, Act::kQ8Pre, kernel_gbps, l2);
      }
    }
    return 0;
  }
  if (mode == "--rows") {
    for (GgmlType type : {GgmlType::kIQ4_XS, GgmlType::kQ4_K}) {
      for (int64_t rows : {1, 2, 4, 8, 12, 16}) {
        BenchGemv(stream, type, 4096, 12288, rows, Act::kQ8, kernel_gbps);
        BenchGemv(stream, type, 12288, 4096, rows, Act::kQ8, kernel_gbps);
      }
    }
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

int main(int argc, char** argv) { return stepserve::kernels::Main(argc > 1 ? argv[1] : ""); }
