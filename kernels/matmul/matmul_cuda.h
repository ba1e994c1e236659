// Quantized GEMV on a CUDA device: Y[rows x out] = X[rows x in] * W^T for 1..16 activation rows
// (the decode path), streaming each weight byte from HBM once. Same layout contract as
// kernels/matmul/matmul.h (W: `out` rows of GGUF blocks, `w_row_bytes` apart; X, Y: F32,
// row-major with their own strides), with every pointer in device memory and the work enqueued on
// `stream` (asynchronous: errors from the kernel itself surface at the next synchronization).
//
// Supported types: Q8_0, Q4_K, Q5_K (kQ8 only), Q6_K, IQ4_XS. Alignment: `w` and `w_row_bytes` must
// be multiples of 16 bytes, so every weight row starts on a 16-byte boundary and the kernels can
// use wide loads. GGUF rows whose byte size is not a multiple of 16 (e.g. IQ4_XS with in = 256: 136
// bytes) are padded on upload (cudaMemcpy2D with a padded pitch).
//
// Two activation modes (GemvCudaArgs::activations):
//  - kQ8 (default, fast): X is first quantized per 32 values to int8 with one F32 scale
//    (d = max|x| / 127, q = round-to-nearest-even(x / d)) into caller-provided scratch, then the
//    weights are dotted against the int8 values with dp4a. Compared with exact F32 activations the
//    result differs by the activation rounding: ||y - y_f32|| / ||y_f32|| ~ 6e-3 on random data
//    (the weights stay exact). Against the same computation on the quantized X it is exact up to
//    F32 accumulation order (~1e-7). With `x_prequantized` the quantization step is skipped and the
//    scratch from an earlier call with the same X, `in` and `rows` is reused (several matmuls that
//    share an input quantize it once); that call's type must keep the int8 values in the same
//    order (SameQ8ScratchOrder).
//  - kF32 (reference): every weight is dequantized and multiplied by the F32 activation; exact up
//  to
//    accumulation order, several times slower (bound by L1 traffic, see docs/cuda-host.md).
#ifndef STEPSERVE_KERNELS_MATMUL_MATMUL_CUDA_H_
#define STEPSERVE_KERNELS_MATMUL_MATMUL_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/quant/ggml_type.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

inline constexpr int64_t kGemvCudaMaxRows = 16;

enum class GemvCudaActivations : int { kQ8 = 0, kF32 = 1 };

struct GemvCudaArgs {
  GgmlType type = GgmlType::kQ8_0;
  const void* w = nullptr;  // device
  int64_t w_row_bytes = 0;  // >= RowBytes(type, in), multiple of 16
  int64_t in = 0;           // multiple of the type's block size
  int64_t out = 0;
  const float* x = nullptr;  // device
  int64_t x_stride = 0;      // floats between X rows, >= in
  int64_t rows = 0;          // 1..GemvCudaMaxRows(type, activations)
  float* y = nullptr;        // device, must not alias X
  int64_t y_stride = 0;      // floats between Y rows, >= out
  GemvCudaActivations activations = GemvCudaActivations::kQ8;
  // kQ8 only: device memory, 16-byte aligned, >= GemvCudaScratchBytes(in, rows) bytes; must not
  // overlap W, X or Y. Written by the quantization step, read by the GEMV.
  void* scratch = nullptr;
  int64_t scratch_bytes = 0;
  bool x_prequantized = false;  // kQ8 only: scratch already holds this X (x may then be null)
};

// One activation row in kQ8 mode (GemvCuda with rows == 1, GemvIndexedCuda without grouping) can
// run a kernel that streams the weights through shared memory with bulk copies (sm_90) instead of
// the warp-per-row kernel; both compute the same per-lane sums in the same order. kAuto (the
// default) streams where it measured faster on the H200 (bench_gemv, model decode): Q6_K, and any
// matrix of at least kGemvStreamAutoBytes (the LM head). STEPSERVE_GEMV_STREAM=0 / 1 / 2 in the
// environment (read at the first GEMV) selects never / auto / always; SetGemvCudaStreamMode
// overrides it for every later launch (tests, A/B runs) and returns the previous mode.
enum class GemvStreamMode : int { kNever = 0, kAuto = 1, kAlways = 2 };
inline constexpr int64_t kGemvStreamAutoBytes = int64_t{64} << 20;
GemvStreamMode SetGemvCudaStreamMode(GemvStreamMode mode);

// Grouped mode (GemvIndexedCuda with grouping) on IQ4_XS through the grouped tensor-core GEMM
// (64 weight rows x 32 groups per CTA) instead of the grouped tensor-core GEMV (many groups per
// matrix: a prefill's MoE) or the dp4a grouped GEMV (few). kManyGroups by default (measured on
// the H200); STEPSERVE_GROUPED_GEMM=0 / 2 (read at the first use) selects kOff / kAlways;
// SetGroupedGemmCuda overrides it for every later launch (tests, A/B runs) and returns the
// previous mode.
enum class GroupedGemmMode : int { kOff = 0, kManyGroups = 1, kAlways = 2 };
GroupedGemmMode SetGroupedGemmCuda(GroupedGemmMode mode);
// Where the grouped GEMM runs (any mode but kOff) with `in` a multiple of 256 and
// GemvIndexedCuda's scratch holds GemvIndexedCudaScratchBytes, its F16 form (weights decoded to
// F16, activations converted to F16, F32 accumulation) is taken instead of the int8 one: for
// IQ4_XS, Q4_K and Q6_K by default (kAll), IQ4_XS and Q4_K with kIq4XsAndQ4K, IQ4_XS only with
// kIq4Xs. STEPSERVE_GROUPED_GEMM_F16=0 / 1 / 2 at the first use selects kOff / kIq4Xs /
// kIq4XsAndQ4K; SetGroupedGemmF16Cuda overrides it for every later launch and returns the previous
// mode.
enum class GroupedGemmF16Mode : int { kOff = 0, kIq4Xs = 1, kIq4XsAndQ4K = 2, kAll = 3 };
GroupedGemmF16Mode SetGroupedGemmF16Cuda(GroupedGemmF16Mode mode);
// Whether GemvIndexedCuda takes the grouped F16 GEMM for `type` in the current mode.
bool GroupedGemmF16Enabled(GgmlType type);

// The most activation rows GemvCuda takes: kGemvCudaMaxRows, or for IQ4_XS with kQ8 activations
// the wide tensor-core GEMV's limit (one pass of up to 32 rows; STEPSERVE_GEMV_MMA_WIDE=0: 16)
// unless the tensor-core GEMV is turned off (STEPSERVE_GEMV_MMA=0).
int64_t GemvCudaMaxRows(GgmlType type, GemvCudaActivations activations);
// Sets the wide tensor-core GEMV's limit (clamped to 16..32; 16 turns it off) for tests and A/B
// runs; returns the previous one.
int64_t SetGemvCudaMmaWideMaxRows(int64_t rows);

// Whether the one-row IQ4_XS GEMV runs its whole iterations without per-step guards (the same
// bits; STEPSERVE_GEMV_ONE_ROW_WHOLE=1, off: no step gain measured in session 45): for tests and
// A/B runs; returns the previous setting.
bool SetGemvCudaOneRowWhole(bool on);

// The grouped GEMV's IQ4_XS kernels compiled for a fixed block count, without per-step guards
// (the same bits; STEPSERVE_GROUPED_WHOLE, 3 by default since session 45), a mask: 1 the short rows
// of exactly five blocks (the experts' 1280-wide down), 2 the long rows of exactly 16 (their
// 4096-wide gate / up). For tests and A/B runs; returns the previous mask. The launches that took
// one so far in this process (tests check the path: a silent fallback would give the same bits).
int SetGemvCudaGroupedWhole(int mask);
int64_t GemvCudaGroupedWholeLaunches();

// Scratch bytes the kQ8 mode needs for `rows` activation rows of `in` values.
int64_t GemvCudaScratchBytes(int64_t in, int64_t rows);
// Scratch bytes with which GemvIndexedCuda can take any of its paths, the grouped F16 GEMM (F16
// activations: 2 bytes per value) included; GemvCudaScratchBytes suffices for the int8 ones.
int64_t GemvIndexedCudaScratchBytes(int64_t in, int64_t rows);

// Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS; while the low-bit types are on (below) also IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, Q2_K and Q3_K (Q5_K and those with kQ8 activations only).
bool GemvCudaSupports(GgmlType type);
// The 2-3 bit types of the published Step files (Step-3.5-Flash's IQ3_S / IQ3_XXS expert gate/up,
// Step-5's IQ2_XXS / Q2_K / Q3_K, Step-3.7's IQ2_XXS, community files' IQ2_XS / IQ2_S):
// int8-activation pieces for the one-row, 2-16 row, indexed and grouped GEMVs
// (gemv_q8x_pieces_low_bit.cuh), and through them the device MoE (MoeGemvCuda) instead of the
// host-grouped path. On unless STEPSERVE_GEMV_LOW_BIT=0 (read once) or
// SetGemvCudaLowBitTypes(false). Measured on the H200 (session 20, results-h200-v18.txt, ms per
// step at 1 / 4 / 16 / 64 streams, prefill 2048 tok/s): Step-5 shapes (step5-q2, 20 layers)
// 8.623 / 26.48 / 88.75 / 270.2, 3427 off -> 3.004 / 6.366 / 17.11 / 38.23, 15119 on;
// Step-3.5-Flash with IQ3_S expert gate/up 17.01 / 52.23 / 171.2 off -> 5.136 / 11.46 / 27.93,
// 7059 on (the GPU tests with them on: gemv, matmul_backend, moe_gemv, moe_cuda).
inline bool GemvCudaLowBitType(GgmlType type) {
  return type == GgmlType::kIQ2_XXS || type == GgmlType::kIQ2_XS || type == GgmlType::kIQ2_S ||
         type == GgmlType::kIQ3_XXS || type == GgmlType::kIQ3_S || type == GgmlType::kQ2_K ||
         type == GgmlType::kQ3_K;
}
// Turns the low-bit types on or off for GemvCudaSupports (tests, A/B runs); returns the previous.
bool SetGemvCudaLowBitTypes(bool on);

// Where the int8 scratch keeps element e (0..31) of each 32-value activation block for weights of
// `type`: at e, except for IQ4_XS, whose GEMV reads the block in the order its table lookup
// yields weights (the nibbles of a 32-bit word in place: low, high nibble of byte 0, then of byte
// 1, ...), so no de-interleave per weight is needed: element 4i + j at 8i + 2j and 16 + 4i + j at
// 8i + 2j + 1 (i, j < 4). The scales and sums are per block either way.
int Q8ScratchPosition(GgmlType type, int e);
// Whether a scratch quantized for type `a` can be reused (x_prequantized) by a call for `b`.
bool SameQ8ScratchOrder(GgmlType a, GgmlType b);

// Checks sizes, strides, alignment and type (host-side only; pointers are not dereferenced).
KernelStatus ValidateGemvCuda(const GemvCudaArgs& args);

// Validates, then enqueues the kernel on `stream`. kInvalidArgument also when the launch itself
// fails (the CUDA error is cleared so it does not leak into the caller's next check).
KernelStatus GemvCuda(const GemvCudaArgs& args, cudaStream_t stream);

// Indexed GEMV for MoE experts at decode sizes: `groups` independent products, group g computing
//   y[g] = W_{ids[g]} x[g / x_group_div]
// where W_e is matrix e of a 3-D weight (w + e * w_matrix_bytes, `out` rows of `in`). Token t's
// top-k slots are groups t*k .. t*k+k-1 with x_group_div = k (gate / up: all slots share the
// token's activations) or 1 (down: one intermediate row per slot). The ids stay in device memory
// (written by the router on the GPU), so there is no host round trip and the call can be captured
// in a CUDA graph. An id outside [0, n_matrices) yields a zero output row. kQ8 activations only;
// x has x_rows rows (quantized into `scratch`, at least GemvCudaScratchBytes(in, x_rows) bytes,
// unless x_prequantized: then the previous call on this scratch had the same type, in, x_rows,
// groups, slots and scratch_bytes, so it wrote the activations in the form this one reads).
struct GemvIndexedCudaArgs {
  GgmlType type = GgmlType::kQ4_K;
  const void* w = nullptr;  // device, first matrix
  int64_t w_row_bytes = 0;  // multiple of 16
  // Bytes between matrices, a multiple of 16: >= out * w_row_bytes (matrices one after another),
  // or column slices of one matrix - matrix i is columns [i * in, (i + 1) * in) of each row of
  // w_row_bytes, so (n_matrices - 1) * w_matrix_bytes + RowBytes(type, in) <= w_row_bytes.
  int64_t w_matrix_bytes = 0;
  int64_t n_matrices = 0;
  int64_t in = 0;
  int64_t out = 0;
  const int32_t* ids = nullptr;  // device, [groups]
  int64_t groups = 0;            // 1..65535
  int64_t x_group_div = 1;       // group g reads activation row g / x_group_div
  const float* x = nullptr;      // device, [x_rows][x_stride]
  int64_t x_stride = 0;
  int64_t x_rows = 0;  // must equal ceil(groups / x_group_div)
  float* y = nullptr;  // device, [groups][y_stride]
  int64_t y_stride = 0;
  void* scratch = nullptr;
  int64_t scratch_bytes = 0;
  bool x_prequantized = false;
  // Optional: x's int8 activations already written in this type's order (Q8ScratchPosition), in
  // the kQ8 scratch layout for x_rows rows (GemvCudaScratchBytes(in, x_rows) bytes, 16-byte
  // aligned; e.g. by the norm that produced x, rms_norm_cuda.h). The int8 paths read them instead
  // of quantizing x into `scratch`; the grouped F16 GEMM, which reads F16, ignores them.
  const void* x_q8 = nullptr;
  // Optional grouping of the groups by id (GroupByIdCuda, moe_gemv_cuda.h), device arrays: with
  // it every matrix is streamed once per few of the groups that picked it instead of once per
  // group (several tokens per expert); `ids` is then not read.
  const int32_t* slot_matrix = nullptr;  // [slots]
  const int32_t* slot_begin = nullptr;   // [slots + 1]
  const int32_t* group_order = nullptr;  // [groups]
  int64_t slots = 0;
  // With a grouping: the grouped F16 GEMM (where its type applies) however few groups a matrix
  // has - a dense matmul of a few rows as one slot (the LM head, STEPSERVE_DENSE_GROUPED_HEAD).
  bool grouped_f16_any_rows = false;
  // Optional, with a grouping: a second set of matrices of the same type, shapes and strides (the
  // MoE up projection beside its gate), written to y2, streamed in the same launch - one grid whose
  // second half of slots takes w2 - where GemvIndexedCudaTakesMatrixPair holds; GemvIndexedCuda
  // rejects it elsewhere. y2 - y must be a whole number of y_stride rows.
  const void* w2 = nullptr;
  float* y2 = nullptr;
};

KernelStatus ValidateGemvIndexedCuda(const GemvIndexedCudaArgs& args);
KernelStatus GemvIndexedCuda(const GemvIndexedCudaArgs& args, cudaStream_t stream);

// Whether GemvIndexedCuda can stream w2 beside w in one launch: the int8 grouped GEMV of long rows
// (a decode batch's experts, not the tensor-core or F16 grouped GEMMs), 2 x slots within a grid's y
// limit, w2 16-byte aligned, y2 a whole number of rows from y.
bool GemvIndexedCudaTakesMatrixPair(const GemvIndexedCudaArgs& args);

// Whether GemvIndexedCuda takes the grouped F16 GEMM for these (valid) arguments. Then, with
// x_prequantized, it reads X from the scratch as F16 rows (x_rows of `in` halves, in the pair
// order of Q8ScratchPosition for IQ4_XS, else natural) instead of converting x: what the MoE's
// SwiGLU writes there directly (moe_gemv_cuda.cu).
bool GemvIndexedCudaTakesGroupedF16(const GemvIndexedCudaArgs& args);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MATMUL_MATMUL_CUDA_H_
