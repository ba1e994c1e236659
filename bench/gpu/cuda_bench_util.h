// Timing helpers shared by the GPU benchmarks (bench_gemv, bench_row_kernels, bench_model):
// a CUDA error check that exits, graph capture of a batch of launches, the median replay time,
// the device-copy bandwidth every memory-bound figure is compared with, and L2-defeating copies of
// a random quantized weight.
#ifndef STEPSERVE_BENCH_GPU_CUDA_BENCH_UTIL_H_
#define STEPSERVE_BENCH_GPU_CUDA_BENCH_UTIL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "kernels/bandwidth/copy_cuda.h"
#include "kernels/common/cuda_check.h"

#define BENCH_CHECK(call)                                                                     \
  do {                                                                                        \
    const cudaError_t err_ = (call);                                                          \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s\n", ::stepserve::kernels::CudaErrorText(#call, err_).c_str()); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace stepserve::bench {

// Captures `launches` calls of `launch(i)` (returning true on success) on `stream` into one
// executable graph; exits on a failed launch.
template <class F>
cudaGraphExec_t CaptureGraph(cudaStream_t stream, int launches, F&& launch) {
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

// Median milliseconds per replay of `graph` over `replays` replays (after one warm-up replay).
inline double GraphMedianMs(cudaGraphExec_t graph, cudaStream_t stream, int replays) {
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

// Read + write bytes per second of a `bytes`-long device-to-device copy, by the copy kernel
// (kernels/bandwidth) or cudaMemcpyAsync: the practical HBM ceiling.
inline double CopyBandwidth(cudaStream_t stream, int64_t bytes, bool use_kernel) {
  void *src, *dst;
  BENCH_CHECK(cudaMalloc(&src, bytes));
  BENCH_CHECK(cudaMalloc(&dst, bytes));
  BENCH_CHECK(cudaMemset(src, 0x5A, bytes));  // not zeros
  const int launches = 10;
  cudaGraphExec_t g = CaptureGraph(stream, launches, [&](int) {
    if (use_kernel) {
      return kernels::CopyCuda(dst, src, bytes, 0, stream) == kernels::KernelStatus::kOk;
    }
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess;
  });
  const double ms = GraphMedianMs(g, stream, 7) / launches;
  cudaGraphExecDestroy(g);
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
}

// `copies` (at least 4, enough to span `span_bytes`) device copies of one random valid `out` x `in`
// weight of `type`, rows padded to 16 bytes, back to back: cycling through them keeps a GEMV's
// weight reads out of L2. Returns the first copy; *row_bytes and *weight_bytes describe one.
inline uint8_t* DeviceWeightCopies(GgmlType type, int64_t in, int64_t out, int64_t span_bytes,
                                   uint64_t seed, int64_t* row_bytes, int64_t* weight_bytes,
                                   int* copies) {
  *row_bytes = (RowBytes(type, in) + 15) / 16 * 16;
  *weight_bytes = *row_bytes * out;
  *copies = static_cast<int>(std::max<int64_t>(4, span_bytes / *weight_bytes + 1));
  std::vector<uint8_t> host(static_cast<size_t>(*weight_bytes), 0);
  const int64_t blocks = in / TypeInfo(type).block_elems;
  for (int64_t o = 0; o < out; ++o) {
    if (!quant::FillRandomBlocks(type, host.data() + o * *row_bytes, blocks, seed + o, 1.0f)
             .ok()) {
      std::fprintf(stderr, "FillRandomBlocks failed\n");
      std::exit(1);
    }
  }
  uint8_t* w;
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&w), *weight_bytes * *copies));
  BENCH_CHECK(cudaMemcpy(w, host.data(), *weight_bytes, cudaMemcpyHostToDevice));
  for (int c = 1; c < *copies; ++c) {
    BENCH_CHECK(cudaMemcpy(w + c * *weight_bytes, w, *weight_bytes, cudaMemcpyDeviceToDevice));
  }
  return w;
}

}  // namespace stepserve::bench

#endif  // STEPSERVE_BENCH_GPU_CUDA_BENCH_UTIL_H_
