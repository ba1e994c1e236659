// What a dependent kernel boundary costs inside a replayed graph (JSON lines): a chain of N
// kernels, each streaming `bytes` of its own (0 or 1-64 MiB; no L2 reuse: slices rotate through
// 1 GiB), against one kernel streaming all N slices (at most the 1 GiB span: single_kernel_bytes,
// its time scaled to the chain's bytes) - the difference per kernel is the boundary's cost: the
// last wave's tail, the next grid's launch, its wait and its memory ramp. Three chain forms: plain
// stream order; programmatic dependent launch (PDL) with every kernel waiting first, as the
// decode kernels do; and PDL with the first loads issued before the wait (the weights-before-wait
// form of the one-row GEMV). Why: a batch-1 decode layer is ~12 dependent kernels, and the step
// scales with the card's bandwidth only 1.05-1.16x from the H100 to the H200 (docs/cuda-engine.md,
// session 31): how much of a layer the boundaries take decides whether fusing kernels, rather
// than speeding up each one, is where the batch-1 target lies.
//   bench_launch_chain [--kernels N] [--replays R]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench/gpu/cuda_bench_util.h"
#include "kernels/common/pdl.cuh"

namespace stepserve::bench {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kSpan = int64_t{1} << 30;  // the slices rotate through this much memory

// Streams n16 16-byte words from src (grid-stride), xor-folding them into one word that is
// stored only if it matches a value random data never gives (so the loads cannot be dropped).
// kEarly: each thread's first word is loaded before the PDL wait (src is never written).
template <bool kEarly>
__global__ void __launch_bounds__(kThreads)
    StreamSliceKernel(const uint4* src, int64_t n16, uint32_t* sink) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  uint32_t acc = 0;
  if constexpr (kEarly) {
    uint4 first = make_uint4(0, 0, 0, 0);
    if (i < n16) first = __ldcs(src + i);
    kernels::WaitForPrimaryGrid();
    kernels::AllowDependentLaunch();
    acc ^= first.x ^ first.y ^ first.z ^ first.w;
    i += stride;
  } else {
    kernels::WaitForPrimaryGrid();
    kernels::AllowDependentLaunch();
  }
  for (; i < n16; i += stride) {
    const uint4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

enum class Form { kPlain, kPdl, kPdlEarly };
const char* FormName(Form f) {
  return f == Form::kPlain ? "plain" : f == Form::kPdl ? "pdl" : "pdl_early";
}

cudaError_t LaunchSlice(Form form, const uint8_t* base, int64_t offset, int64_t bytes, int blocks,
                        uint32_t* sink, cudaStream_t stream) {
  const auto* src = reinterpret_cast<const uint4*>(base + offset);
  const int64_t n16 = bytes / 16;
  if (form == Form::kPdlEarly) {
    return kernels::LaunchOverlapping(true, StreamSliceKernel<true>, dim3(blocks), dim3(kThreads),
                                      0, stream, src, n16, sink);
  }
  return kernels::LaunchOverlapping(form == Form::kPdl, StreamSliceKernel<false>, dim3(blocks),
                                    dim3(kThreads), 0, stream, src, n16, sink);
}

int Main(int argc, char** argv) {
  int kernels_per_chain = 200, replays = 15;
  for (int a = 1; a + 1 < argc; a += 2) {
    if (std::strcmp(argv[a], "--kernels") == 0) kernels_per_chain = std::atoi(argv[a + 1]);
    if (std::strcmp(argv[a], "--replays") == 0) replays = std::atoi(argv[a + 1]);
  }
  if (kernels_per_chain < 2 || replays < 1) {
    std::fprintf(stderr, "usage: bench_launch_chain [--kernels N >= 2] [--replays R >= 1]\n");
    return 2;
  }
  int device = 0, sms = 0;
  BENCH_CHECK(cudaGetDevice(&device));
  BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, device));
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double copy_gbps = CopyBandwidth(stream, int64_t{1} << 30, /*use_kernel=*/true) / 1e9;
  std::printf("{\"bench\":\"device\",\"name\":\"%s\",\"sms\":%d,\"copy_gbps\":%.1f}\n", prop.name,
              sms, copy_gbps);
  uint8_t* base = nullptr;
  uint32_t* sink = nullptr;
  BENCH_CHECK(cudaMalloc(&base, kSpan));
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&sink), 16));
  BENCH_CHECK(cudaMemset(base, 0x3C, kSpan));
  const int blocks = 4 * sms;  // one wave of 4 CTAs of 256 threads per SM, as the copy kernel
  // Slices of at least 1 MiB: a chain then spans 200 MiB or more, so neither it nor the single
  // kernel over the same bytes finds the previous replay's data in L2 (50 MB).
  for (const int64_t bytes :
       {int64_t{0}, int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20, int64_t{64} << 20}) {
    // The slice offsets of kernel k: consecutive, wrapping inside the span.
    const auto offset = [&](int k) { return (static_cast<int64_t>(k) * bytes) % kSpan; };
    // One kernel over the same N slices' worth of bytes (contiguous, wrapping ignored: N x 16 MiB
    // fits), the chain's bytes with one boundary.
    const int64_t total = std::min<int64_t>(bytes * kernels_per_chain, kSpan);
    cudaGraphExec_t single = CaptureGraph(stream, 1, [&](int) {
      return LaunchSlice(Form::kPlain, base, 0, total, blocks, sink, stream) == cudaSuccess;
    });
    const double single_us = 1e3 * GraphMedianMs(single, stream, replays);
    cudaGraphExecDestroy(single);
    for (const Form form : {Form::kPlain, Form::kPdl, Form::kPdlEarly}) {
      cudaGraphExec_t chain = CaptureGraph(stream, kernels_per_chain, [&](int k) {
        return LaunchSlice(form, base, offset(k), bytes, blocks, sink, stream) == cudaSuccess;
      });
      const double chain_us = 1e3 * GraphMedianMs(chain, stream, replays);
      cudaGraphExecDestroy(chain);
      const double per_kernel = chain_us / kernels_per_chain;
      const double boundary = (chain_us - single_us * static_cast<double>(bytes) *
                                              kernels_per_chain / std::max<int64_t>(total, 1)) /
                              kernels_per_chain;
      std::printf(
          "{\"bench\":\"launch_chain\",\"form\":\"%s\",\"bytes_per_kernel\":%ld,\"kernels\":%d,"
          "\"us_per_kernel\":%.3f,\"chain_gbps\":%.1f,\"single_kernel_us\":%.2f,"
          "\"single_kernel_bytes\":%ld,\"boundary_us\":%.3f,\"fraction_of_copy\":%.3f}\n",
          FormName(form), static_cast<long>(bytes), kernels_per_chain, per_kernel,
          per_kernel > 0 ? static_cast<double>(bytes) / (per_kernel * 1e3) : 0.0, single_us,
          static_cast<long>(total), bytes > 0 ? boundary : per_kernel,
          copy_gbps > 0 && per_kernel > 0
              ? static_cast<double>(bytes) / (per_kernel * 1e3) / copy_gbps
              : 0.0);
      std::fflush(stdout);
    }
  }
  cudaFree(base);
  cudaFree(sink);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace stepserve::bench

int main(int argc, char** argv) { return stepserve::bench::Main(argc, argv); }
