// Element-wise CUDA kernels (elementwise_cuda.h). Launch shape shared by all three: blockIdx.x
// tiles the columns of a row, blockIdx.y strides over the rows (so any number of rows fits the
// 65535 limit of gridDim.y) and every thread handles one column - or four, where rows are 16-byte
// aligned - of its rows: coalesced, and no integer division per element except the head index of
// the gate.
#include <algorithm>
#include <cstdint>

#include "kernels/common/alignment.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/sigmoid.cuh"
#include "kernels/elementwise/elementwise_cuda.h"
#include "kernels/matmul/q8_quantize.cuh"

namespace stepserve::kernels {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxGridY = 65535;

// The same selections as std::min / std::clamp in the CPU kernels (also for signed zeros).
__device__ __forceinline__ float MinLike(float a, float b) { return b < a ? b : a; }
__device__ __forceinline__ float ClampLike(float v, float lo, float hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

// The clamped SwiGLU of one value (spec 4.5), shared by SwiGluKernel and SwiGluQ8Kernel.
__device__ __forceinline__ float SwiGluValue(float g, float u, float limit, bool clamp) {
  const float silu = g / (1.0f + expf(-g));
  return clamp ? MinLike(silu, limit) * ClampLike(u, -limit, limit) : silu * u;
}

// kVec: columns per thread, 1 or 4 (float4 loads and stores where every row start is 16-byte
// aligned and the columns a multiple of 4; for the gate head_dim too, so 4 columns share a head).
// The same float operations per value either way, so the same results; the 4-wide form moves a
// prefill's rows at a higher fraction of bandwidth (one element per thread measured ~40% in the
// session-9 prefill profile).
template <int kVec>
__global__ void HeadGateKernel(HeadGateArgs a) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t col = kVec * (int64_t{blockIdx.x} * blockDim.x + threadIdx.x);
  if (col >= a.heads * a.head_dim) return;
  const int64_t head = col / a.head_dim;
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const float s = Sigmoid(a.gate[r * a.gate_stride + head]);
    float* o = a.o + r * a.o_stride + col;
    if constexpr (kVec == 4) {
      const float4 v = *reinterpret_cast<const float4*>(o);
      *reinterpret_cast<float4*>(o) = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
    } else {
      *o *= s;
    }
  }
}

template <int kVec>
__global__ void SwiGluKernel(SwiGluArgs a, bool clamp) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t col = kVec * (int64_t{blockIdx.x} * blockDim.x + threadIdx.x);
  if (col >= a.n) return;
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const float* g = a.g + r * a.g_stride + col;
    const float* u = a.u + r * a.u_stride + col;
    float* z = a.z + r * a.z_stride + col;
    if constexpr (kVec == 4) {
      const float4 g4 = *reinterpret_cast<const float4*>(g);
      const float4 u4 = *reinterpret_cast<const float4*>(u);
      *reinterpret_cast<float4*>(z) = make_float4(
          SwiGluValue(g4.x, u4.x, a.limit, clamp), SwiGluValue(g4.y, u4.y, a.limit, clamp),
          SwiGluValue(g4.z, u4.z, a.limit, clamp), SwiGluValue(g4.w, u4.w, a.limit, clamp));
    } else {
      *z = SwiGluValue(*g, *u, a.limit, clamp);
    }
  }
}

using q8_quantize::Q8Rows;
using q8_quantize::StoreQ8Both;

// HeadGateKernel / SwiGluKernel with 4 columns per thread (the same float operations per value),
// also writing the result as the GEMV's int8 activations (fused quantization: the GEMV after
// them skips its quantizer). Needs n % 32 == 0 (8 threads per block, whole groups stop
// together), 16-byte aligned rows and head_dim % 4 == 0 (4 columns share a head).
__global__ void HeadGateQ8Kernel(HeadGateArgs a, Q8Rows q) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t col = 4 * (int64_t{blockIdx.x} * blockDim.x + threadIdx.x);
  if (col >= q.n) return;
  const int64_t head = col / a.head_dim;
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const float s = Sigmoid(a.gate[r * a.gate_stride + head]);
    float4* o = reinterpret_cast<float4*>(a.o + r * a.o_stride + col);
    float4 v = *o;
    v = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
    *o = v;
    StoreQ8Both(q, r, col, v);
  }
}

__global__ void SwiGluQ8Kernel(SwiGluArgs a, bool clamp, Q8Rows q) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t col = 4 * (int64_t{blockIdx.x} * blockDim.x + threadIdx.x);
  if (col >= q.n) return;
  auto one = [&](float g, float u) { return SwiGluValue(g, u, a.limit, clamp); };
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const float4 g = *reinterpret_cast<const float4*>(a.g + r * a.g_stride + col);
    const float4 u = *reinterpret_cast<const float4*>(a.u + r * a.u_stride + col);
    const float4 z = make_float4(one(g.x, u.x), one(g.y, u.y), one(g.z, u.z), one(g.w, u.w));
    *reinterpret_cast<float4*>(a.z + r * a.z_stride + col) = z;
    StoreQ8Both(q, r, col, z);
  }
}

template <int kVec>
__global__ void AddKernel(AddArgs a) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t col = kVec * (int64_t{blockIdx.x} * blockDim.x + threadIdx.x);
  if (col >= a.n) return;
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const float* x = a.a + r * a.a_stride + col;
    const float* y = a.b + r * a.b_stride + col;
    float* out = a.y + r * a.y_stride + col;
    if constexpr (kVec == 4) {
      const float4 x4 = *reinterpret_cast<const float4*>(x);
      const float4 y4 = *reinterpret_cast<const float4*>(y);
      *reinterpret_cast<float4*>(out) =
          make_float4(x4.x + y4.x, x4.y + y4.y, x4.z + y4.z, x4.w + y4.w);
    } else {
      *out = *x + *y;
    }
  }
}

// Grid for `rows` rows of `cols` columns; false when the columns do not fit gridDim.x.
bool RowGrid(int64_t cols, int64_t rows, dim3* grid) {
  const int64_t col_blocks = (cols + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (col_blocks > 0x7FFFFFFF) return false;
  *grid = dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(std::min(rows, kMaxGridY)));
  return true;
}

KernelStatus LaunchResult() {
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

// One thread per 4 columns.
bool Q8Grid(int64_t cols, int64_t rows, dim3* grid) { return RowGrid(cols / 4, rows, grid); }

}  // namespace

bool HeadGateQ8CudaSupports(const HeadGateArgs& a) {
  const int64_t n = a.heads * a.head_dim;
  return ValidateHeadGate(a) == KernelStatus::kOk && a.rows >= 1 &&
         a.rows <= kElementwiseQ8MaxRows && n % 32 == 0 && a.head_dim % 4 == 0 &&
         a.o_stride % 4 == 0 && Aligned16(a.o);
}

bool SwiGluQ8CudaSupports(const SwiGluArgs& a) {
  return ValidateSwiGlu(a) == KernelStatus::kOk && a.rows >= 1 && a.rows <= kElementwiseQ8MaxRows &&
         a.n % 32 == 0 && a.g_stride % 4 == 0 && a.u_stride % 4 == 0 && a.z_stride % 4 == 0 &&
         Aligned16(a.g) && Aligned16(a.u) && Aligned16(a.z);
}

KernelStatus HeadGateQ8Cuda(const HeadGateArgs& a, void* natural, void* pair, cudaStream_t stream) {
  if (!HeadGateQ8CudaSupports(a) || !Aligned16(natural) || !Aligned16(pair)) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t n = a.heads * a.head_dim;
  dim3 grid;
  if (!Q8Grid(n, a.rows, &grid)) return KernelStatus::kTooLarge;
  LaunchWithPdl(HeadGateQ8Kernel, grid, kThreadsPerBlock, 0, stream, a,
                q8_quantize::MakeQ8Rows(natural, pair, n, a.rows));
  return LaunchResult();
}

KernelStatus SwiGluQ8Cuda(const SwiGluArgs& a, void* natural, void* pair, cudaStream_t stream) {
  if (!SwiGluQ8CudaSupports(a) || !Aligned16(natural) || !Aligned16(pair)) {
    return KernelStatus::kInvalidArgument;
  }
  dim3 grid;
  if (!Q8Grid(a.n, a.rows, &grid)) return KernelStatus::kTooLarge;
  LaunchWithPdl(SwiGluQ8Kernel, grid, kThreadsPerBlock, 0, stream, a,
                a.limit > kSwiGluClampThreshold,
                q8_quantize::MakeQ8Rows(natural, pair, a.n, a.rows));
  return LaunchResult();
}

KernelStatus HeadGateCuda(const HeadGateArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateHeadGate(a); s != KernelStatus::kOk) return s;
  if (a.rows == 0) return KernelStatus::kOk;
  const int64_t n = a.heads * a.head_dim;
  const bool vec = a.head_dim % 4 == 0 && a.o_stride % 4 == 0 && Aligned16(a.o);  // so n % 4 == 0
  dim3 grid;
  if (!RowGrid(vec ? n / 4 : n, a.rows, &grid)) return KernelStatus::kTooLarge;
  LaunchWithPdl(vec ? HeadGateKernel<4> : HeadGateKernel<1>, grid, kThreadsPerBlock, 0, stream, a);
  return LaunchResult();
}

KernelStatus SwiGluCuda(const SwiGluArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateSwiGlu(a); s != KernelStatus::kOk) return s;
  if (a.rows == 0) return KernelStatus::kOk;
  const bool vec = a.n % 4 == 0 && a.g_stride % 4 == 0 && a.u_stride % 4 == 0 &&
                   a.z_stride % 4 == 0 && Aligned16(a.g) && Aligned16(a.u) && Aligned16(a.z);
  dim3 grid;
  if (!RowGrid(vec ? a.n / 4 : a.n, a.rows, &grid)) return KernelStatus::kTooLarge;
  LaunchWithPdl(vec ? SwiGluKernel<4> : SwiGluKernel<1>, grid, kThreadsPerBlock, 0, stream, a,
                a.limit > kSwiGluClampThreshold);
  return LaunchResult();
}

KernelStatus AddCuda(const AddArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateAdd(a); s != KernelStatus::kOk) return s;
  if (a.rows == 0) return KernelStatus::kOk;
  const bool vec = a.n % 4 == 0 && a.a_stride % 4 == 0 && a.b_stride % 4 == 0 &&
                   a.y_stride % 4 == 0 && Aligned16(a.a) && Aligned16(a.b) && Aligned16(a.y);
  dim3 grid;
  if (!RowGrid(vec ? a.n / 4 : a.n, a.rows, &grid)) return KernelStatus::kTooLarge;
  LaunchWithPdl(vec ? AddKernel<4> : AddKernel<1>, grid, kThreadsPerBlock, 0, stream, a);
  return LaunchResult();
}

}  // namespace stepserve::kernels
