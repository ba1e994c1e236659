// RMSNorm kernels (rms_norm_cuda.h): a warp per vector for short vectors, a block per vector for
// long ones. Long vectors (the model-wide norms, n_embd = 4096) take the float4 path when sizes
// and pointers allow: up to 1024 threads per vector, each holding its few float4s in registers
// from the sum-of-squares pass to the write pass, so a lone decode row costs one load latency
// instead of a serial loop of them. Otherwise a scalar loop, unrolled so loads overlap.
#include <cstdint>
#include <limits>

#include "kernels/common/alignment.h"
#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/q8_quantize.cuh"
#include "kernels/rms_norm/rms_norm_cuda.h"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kWarpSize;

// Vectors up to this many elements get one warp each (the per-head q/k norms, Dh <= 256).
constexpr int64_t kWarpPerVectorMaxN = 1024;
constexpr int kThreadsPerBlock = 256;
constexpr int kVectorsPerWarpBlock = kThreadsPerBlock / kWarpSize;

struct RmsNormParams {
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride;
  int64_t vectors;  // rows * heads
  int64_t heads;
  int64_t n;
  const float* weight;
  float eps;
  // AddRmsNormCuda only: x (== sum) += add before the norm. The sum is written back through
  // `sum`, a writable alias of x with the same stride.
  const float* add = nullptr;
  int64_t add_stride = 0;
  float* sum = nullptr;
  // kQuant only: the output's int8 form in the GEMV's scratch layout, natural and pair order.
  q8_quantize::Q8Rows q8{};
  // RmsNormBlockVec4Kernel: the weight loaded before the programmatic-launch wait
  // (NormWeightEarly).
  bool weight_early = false;
};

// On unless STEPSERVE_NORM_WEIGHT_EARLY=0 (an A/B switch; session 32).
bool NormWeightEarly() {
  static const bool on = EnvSwitchOn("STEPSERVE_NORM_WEIGHT_EARLY");
  return on;
}

// Start of vector `v` (row v / heads, head v % heads) in a tensor with the given row stride.
template <typename T>
__device__ __forceinline__ T* VectorStart(T* base, int64_t stride, int64_t v, int64_t heads,
                                          int64_t n) {
  return base + (v / heads) * stride + (v % heads) * n;
}

// Normalises one vector with `threads` cooperating threads, this one being `tid`; `sum_sq` is the
// group's total, already reduced.
__device__ __forceinline__ void WriteNormalized(const float* x, float* y, const float* weight,
                                                int64_t n, float sum_sq, float eps, int tid,
                                                int threads) {
  const float mean = sum_sq / static_cast<float>(n);
  const float inv = 1.0f / sqrtf(mean + eps);
  for (int64_t i = tid; i < n; i += threads) y[i] = x[i] * inv * weight[i];
}

__global__ void RmsNormWarpKernel(RmsNormParams p) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int lane = threadIdx.x % kWarpSize;
  const int64_t v = int64_t{blockIdx.x} * kVectorsPerWarpBlock + threadIdx.x / kWarpSize;
  if (v >= p.vectors) return;  // whole warps leave together
  const float* x = VectorStart(p.x, p.x_stride, v, p.heads, p.n);
  float* y = VectorStart(p.y, p.y_stride, v, p.heads, p.n);
  float sum_sq = 0.0f;
  for (int64_t i = lane; i < p.n; i += kWarpSize) sum_sq += x[i] * x[i];
  sum_sq = cuda_reduce::WarpSum(sum_sq);
  WriteNormalized(x, y, p.weight, p.n, sum_sq, p.eps, lane, kWarpSize);
}

__global__ void RmsNormBlockKernel(RmsNormParams p) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  __shared__ float scratch[kWarpSize];
  const int64_t v = blockIdx.x;
  const float* x = VectorStart(p.x, p.x_stride, v, p.heads, p.n);
  float* y = VectorStart(p.y, p.y_stride, v, p.heads, p.n);
  float sum_sq = 0.0f;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < p.n; i += blockDim.x) sum_sq += x[i] * x[i];
  sum_sq = cuda_reduce::BlockSum(sum_sq, scratch);
  WriteNormalized(x, y, p.weight, p.n, sum_sq, p.eps, threadIdx.x, blockDim.x);
}

// Block per vector over float4s: thread t owns float4s t, t + blockDim, ... (kVecPerThread at
// most), kept in registers between the two passes. Needs n % 4 == 0 and 16-byte aligned vector
// starts and weight (checked on the host). In place is safe: each thread rewrites only what it
// read. kAdd (AddRmsNormCuda): the vector is x + add, written back to x first. kQuant: the output
// is also written as the GEMV's int8 activations (q8_quantize.cuh) in both orders; 8 consecutive
// threads hold a 32-value block (n % 32 == 0, blockDim a multiple of 32), so whole groups stop
// together at n4.
//
// The weight is loaded before the programmatic-launch wait where it fits in registers beside the
// cached input (1-2 float4s a thread: n_embd = 4096 is one): weights are never written by a
// kernel, and at decode a norm sits alone between two GEMVs, so the weight's DRAM round trip after
// the reduction was a latency on the step's critical path (49 norms a step at batch 1).
template <int kVecPerThread, bool kAdd, bool kQuant = false>
__global__ void RmsNormBlockVec4Kernel(RmsNormParams p) {
  constexpr bool kEarlyWeight = kVecPerThread <= 2;
  const float4* weight = reinterpret_cast<const float4*>(p.weight);
  const int n4 = static_cast<int>(p.n / 4);
  float4 early_weight[kEarlyWeight ? kVecPerThread : 1];
  if constexpr (kEarlyWeight) {
    if (p.weight_early) {
#pragma unroll
      for (int k = 0; k < kVecPerThread; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < n4) early_weight[k] = weight[i];
      }
    }
  }
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  __shared__ float scratch[kWarpSize];
  const int64_t v = blockIdx.x;
  const float4* x = reinterpret_cast<const float4*>(VectorStart(p.x, p.x_stride, v, p.heads, p.n));
  float4* y = reinterpret_cast<float4*>(VectorStart(p.y, p.y_stride, v, p.heads, p.n));
  float4 cached[kVecPerThread];
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    cached[k] = i < n4 ? x[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (kAdd) {
      if (i < n4) {
        const float4 d = reinterpret_cast<const float4*>(p.add + v * p.add_stride)[i];
        cached[k] =
            make_float4(cached[k].x + d.x, cached[k].y + d.y, cached[k].z + d.z, cached[k].w + d.w);
        reinterpret_cast<float4*>(p.sum + v * p.x_stride)[i] = cached[k];
      }
    }
    // Explicit fused multiply-adds: the sum is then the same in every instantiation (the quantizing
    // and plain kernels must give bitwise the same norm, fused_quant_cuda_test), whatever
    // contraction the compiler would pick for each (it differed once the weight load moved).
    const float4 c = cached[k];
    sum_sq = fmaf(c.w, c.w, fmaf(c.z, c.z, fmaf(c.y, c.y, fmaf(c.x, c.x, sum_sq))));
  }
  sum_sq = cuda_reduce::BlockSum(sum_sq, scratch);
  const float inv = 1.0f / sqrtf(sum_sq / static_cast<float>(p.n) + p.eps);
#pragma unroll
  for (int k = 0; k < kVecPerThread; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i >= n4) break;
    float4 w;
    if constexpr (kEarlyWeight) {
      w = p.weight_early ? early_weight[k] : weight[i];
    } else {
      w = weight[i];
    }
    const float4 c = cached[k];
    const float4 out =
        make_float4(__fmul_rn(__fmul_rn(c.x, inv), w.x), __fmul_rn(__fmul_rn(c.y, inv), w.y),
                    __fmul_rn(__fmul_rn(c.z, inv), w.z), __fmul_rn(__fmul_rn(c.w, inv), w.w));
    y[i] = out;
    if constexpr (kQuant) q8_quantize::StoreQ8Both(p.q8, v, 4 * i, out);
  }
}

// Launches the float4 kernel when the shapes allow it; false when the caller must use the scalar
// block kernel.
template <bool kAdd = false, bool kQuant = false>
bool LaunchBlockVec4(const RmsNormParams& p, cudaStream_t stream) {
  constexpr int kMaxThreads = 1024;
  constexpr int kMaxVecPerThread = 8;  // n up to 32768 floats
  if (p.n % 4 != 0 || p.x_stride % 4 != 0 || p.y_stride % 4 != 0) return false;
  if (!Aligned16(p.x) || !Aligned16(p.y) || !Aligned16(p.weight)) return false;
  if (kAdd && (p.heads != 1 || p.add_stride % 4 != 0 || !Aligned16(p.add))) return false;
  if (kQuant && (p.heads != 1 || p.n % 32 != 0)) return false;
  const int64_t n4 = p.n / 4;
  if (n4 > int64_t{kMaxThreads} * kMaxVecPerThread) return false;
  const int threads = static_cast<int>(
      n4 >= kMaxThreads ? kMaxThreads : (n4 + kWarpSize - 1) / kWarpSize * kWarpSize);
  const int64_t per_thread = (n4 + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(p.vectors);
  RmsNormParams params = p;
  params.weight_early = NormWeightEarly();
  if (per_thread <= 1) {
    LaunchWithPdl(RmsNormBlockVec4Kernel<1, kAdd, kQuant>, blocks, threads, 0, stream, params);
  } else if (per_thread <= 2) {
    LaunchWithPdl(RmsNormBlockVec4Kernel<2, kAdd, kQuant>, blocks, threads, 0, stream, params);
  } else if (per_thread <= 4) {
    LaunchWithPdl(RmsNormBlockVec4Kernel<4, kAdd, kQuant>, blocks, threads, 0, stream, params);
  } else {
    LaunchWithPdl(RmsNormBlockVec4Kernel<8, kAdd, kQuant>, blocks, threads, 0, stream, params);
  }
  return true;
}

}  // namespace

KernelStatus RmsNormCuda(const RmsNormArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateRmsNorm(a); s != KernelStatus::kOk) return s;
  const int64_t vectors = a.rows * a.heads;
  if (vectors == 0) return KernelStatus::kOk;
  const RmsNormParams p{a.x, a.x_stride, a.y, a.y_stride, vectors, a.heads, a.n, a.weight, a.eps};
  constexpr int64_t kMaxGrid = std::numeric_limits<int32_t>::max();
  if (a.n <= kWarpPerVectorMaxN) {
    const int64_t blocks = (vectors + kVectorsPerWarpBlock - 1) / kVectorsPerWarpBlock;
    if (blocks > kMaxGrid) return KernelStatus::kTooLarge;
    LaunchWithPdl(RmsNormWarpKernel, static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream, p);
  } else {
    if (vectors > kMaxGrid) return KernelStatus::kTooLarge;
    if (LaunchBlockVec4(p, stream)) {
      return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
    }
    // About 16 elements per thread: 256 threads for n_embd = 4096, 1024 from 16384 on.
    const int threads = a.n <= 4096 ? 256 : (a.n <= 8192 ? 512 : 1024);
    LaunchWithPdl(RmsNormBlockKernel, static_cast<unsigned>(vectors), threads, 0, stream, p);
  }
  if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

bool AddRmsNormCudaSupports(const RmsNormArgs& a, const float* add, int64_t add_stride) {
  return ValidateRmsNorm(a) == KernelStatus::kOk && add != nullptr && add_stride >= a.n &&
         add_stride % 4 == 0 && Aligned16(add) && a.heads == 1 && a.n > kWarpPerVectorMaxN &&
         a.n % 4 == 0 && a.n / 4 <= 1024 * 8 && a.x_stride % 4 == 0 && a.y_stride % 4 == 0 &&
         Aligned16(a.x) && Aligned16(a.y) && Aligned16(a.weight) &&
         a.rows <= std::numeric_limits<int32_t>::max();
}

namespace {

bool Q8OutputsUsable(const RmsNormQ8Outputs& q8) {
  return q8.natural != nullptr && q8.pair != nullptr && Aligned16(q8.natural) && Aligned16(q8.pair);
}

}  // namespace

KernelStatus AddRmsNormCuda(const RmsNormArgs& a, float* x, const float* add, int64_t add_stride,
                            cudaStream_t stream, const RmsNormQ8Outputs* q8) {
  if (x != a.x || !AddRmsNormCudaSupports(a, add, add_stride)) {
    return KernelStatus::kInvalidArgument;
  }
  if (q8 != nullptr && (!RmsNormQ8CudaSupports(a) || !Q8OutputsUsable(*q8))) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.rows == 0) return KernelStatus::kOk;
  RmsNormParams p{a.x, a.x_stride, a.y, a.y_stride, a.rows, 1, a.n, a.weight, a.eps};
  p.add = add;
  p.add_stride = add_stride;
  p.sum = x;
  bool launched = false;
  if (q8 != nullptr) {
    p.q8 = q8_quantize::MakeQ8Rows(q8->natural, q8->pair, p.n, p.vectors);
    launched = LaunchBlockVec4<true, true>(p, stream);
  } else {
    launched = LaunchBlockVec4<true>(p, stream);
  }
  if (!launched || cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

bool RmsNormQ8CudaSupports(const RmsNormArgs& a) {
  return ValidateRmsNorm(a) == KernelStatus::kOk && a.heads == 1 && a.n > kWarpPerVectorMaxN &&
         a.n % 32 == 0 && a.n / 4 <= 1024 * 8 && a.x_stride % 4 == 0 && a.y_stride % 4 == 0 &&
         Aligned16(a.x) && Aligned16(a.y) && Aligned16(a.weight) && a.rows >= 1 &&
         a.rows <= kRmsNormQ8MaxRows;
}

KernelStatus RmsNormQ8Cuda(const RmsNormArgs& a, const RmsNormQ8Outputs& q8, cudaStream_t stream) {
  if (!RmsNormQ8CudaSupports(a) || !Q8OutputsUsable(q8)) return KernelStatus::kInvalidArgument;
  RmsNormParams p{a.x, a.x_stride, a.y, a.y_stride, a.rows, 1, a.n, a.weight, a.eps};
  p.q8 = q8_quantize::MakeQ8Rows(q8.natural, q8.pair, p.n, p.vectors);
  if (!LaunchBlockVec4<false, true>(p, stream) || cudaGetLastError() != cudaSuccess) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
