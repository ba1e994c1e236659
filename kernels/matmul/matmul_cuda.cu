// GemvCuda entry point (see matmul_cuda.h): argument checks and dispatch to the int8-activation
// path (quantizer + dp4a kernels, gemv_q8x_cuda.cu) or the exact F32 path (gemv_f32x_cuda.cu).
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "engine/quant/quant_tables.h"
#include "kernels/matmul/dequant_cuda.h"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/matmul_cuda.h"

namespace stepserve::kernels {

using gemv_internal::GemvParams;
using gemv_internal::kWarpsPerBlock;

namespace {

std::atomic<bool>& LowBitTypesSetting() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("STEPSERVE_GEMV_LOW_BIT");
    return v == nullptr || v[0] != '0';
  }()};
  return on;
}

// The grids the low-bit i-quant pieces read (GemvParams): this device's table copies, made on the
// first call for the device (which synchronizes it once, so before any step is recorded).
KernelStatus SetGridTables(GgmlType type, GemvParams* p) {
  if (!GemvCudaLowBitType(type)) return KernelStatus::kOk;
  DequantTables t;
  if (const KernelStatus s = DeviceDequantTables(&t); s != KernelStatus::kOk) return s;
  p->iq2xxs_grid = t.iq2xxs_grid;
  p->iq2xs_grid = t.iq2xs_grid;
  p->iq2s_grid = t.iq2s_grid;
  p->iq3xxs_grid = t.iq3xxs_grid;
  p->iq3s_grid = t.iq3s_grid;
  return KernelStatus::kOk;
}

}  // namespace

bool SetGemvCudaLowBitTypes(bool on) { return LowBitTypesSetting().exchange(on); }

bool GemvCudaSupports(GgmlType type) {
  if (GemvCudaLowBitType(type)) return LowBitTypesSetting().load(std::memory_order_relaxed);
  return type == GgmlType::kQ8_0 || type == GgmlType::kQ4_K || type == GgmlType::kQ5_K ||
         type == GgmlType::kQ6_K || type == GgmlType::kIQ4_XS;
}

int64_t GemvCudaMaxRows(GgmlType type, GemvCudaActivations activations) {
  const bool mma = type == GgmlType::kIQ4_XS && activations == GemvCudaActivations::kQ8 &&
                   gemv_internal::GemvMmaMinRows() <= gemv_internal::kGemvMmaMaxRows;
  return mma ? gemv_internal::GemvMmaWideMaxRows() : kGemvCudaMaxRows;
}

int64_t SetGemvCudaMmaWideMaxRows(int64_t rows) {
  const int64_t clamped = rows < kGemvCudaMaxRows ? kGemvCudaMaxRows
                          : rows > gemv_internal::kGemvMmaWideMaxRows
                              ? gemv_internal::kGemvMmaWideMaxRows
                              : rows;
  return gemv_internal::GemvMmaWideMaxRowsSetting().exchange(static_cast<int>(clamped));
}

bool SetGemvCudaOneRowWhole(bool on) {
  return gemv_internal::GemvOneRowWholeSetting().exchange(on);
}

int SetGemvCudaGroupedWhole(int mask) {
  return gemv_internal::GroupedWholeSetting().exchange(mask & 3);
}

int64_t GemvCudaGroupedWholeLaunches() { return gemv_internal::GroupedWholeLaunchCount().load(); }

int64_t GemvCudaScratchBytes(int64_t in, int64_t rows) {
  if (in <= 0 || rows <= 0) return 0;
  return gemv_internal::Q8ScalesOffset(in, rows) +
         rows * (in / gemv_internal::kQ8BlockElems) * static_cast<int64_t>(sizeof(float2));
}

int64_t GemvIndexedCudaScratchBytes(int64_t in, int64_t rows) {
  const int64_t q8 = GemvCudaScratchBytes(in, rows);
  const int64_t f16 = in > 0 && rows > 0 ? 2 * in * rows : 0;
  return q8 > f16 ? q8 : f16;
}

KernelStatus ValidateGemvCuda(const GemvCudaArgs& a) {
  if (!GemvCudaSupports(a.type)) return KernelStatus::kUnsupportedType;
  const bool q8 = a.activations == GemvCudaActivations::kQ8;
  if (!q8 && a.activations != GemvCudaActivations::kF32) return KernelStatus::kInvalidArgument;
  // The exact F32 kernels have no Q5_K or low-bit piece (callers take the generic GEMV for them).
  if (!q8 && (a.type == GgmlType::kQ5_K || GemvCudaLowBitType(a.type))) {
    return KernelStatus::kUnsupportedType;
  }
  const bool needs_x = !(q8 && a.x_prequantized);
  if (a.w == nullptr || a.y == nullptr || (needs_x && a.x == nullptr)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.in <= 0 || a.out <= 0 || a.rows < 1 || a.rows > GemvCudaMaxRows(a.type, a.activations)) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t block = TypeInfo(a.type).block_elems;
  if (a.in % block != 0) return KernelStatus::kInvalidArgument;
  if (a.w_row_bytes < RowBytes(a.type, a.in) || a.w_row_bytes % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.w) % 16 != 0) {
    return KernelStatus::kInvalidArgument;
  }
  // Activations are read as float4 (both paths).
  if (needs_x &&
      (a.x_stride < a.in || a.x_stride % 4 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.y_stride < a.out) return KernelStatus::kInvalidArgument;
  if (q8 && (a.scratch == nullptr || reinterpret_cast<uintptr_t>(a.scratch) % 16 != 0 ||
             a.scratch_bytes < GemvCudaScratchBytes(a.in, a.rows))) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.out > int64_t{0x7FFFFFFF} * kWarpsPerBlock) return KernelStatus::kTooLarge;
  return KernelStatus::kOk;
}

int Q8ScratchPosition(GgmlType type, int e) {
  if (type != GgmlType::kIQ4_XS) return e;
  return e < 16 ? 8 * (e / 4) + 2 * (e % 4) : 8 * ((e - 16) / 4) + 2 * (e % 4) + 1;
}

bool SameQ8ScratchOrder(GgmlType a, GgmlType b) {
  return (a == GgmlType::kIQ4_XS) == (b == GgmlType::kIQ4_XS);
}

namespace gemv_internal {

KernelStatus MakeGemvParams(GgmlType type, const void* w, int64_t w_row_bytes, int64_t in,
                            int64_t out, const float* x, int64_t x_stride, float* y,
                            int64_t y_stride, GemvParams* out_params) {
  GemvParams p{};
  p.x_pair_order = type == GgmlType::kIQ4_XS;  // see Q8ScratchPosition
  p.w = static_cast<const uint8_t*>(w);
  p.w_row_bytes = w_row_bytes;
  p.in = in;
  p.out = out;
  p.x = x;
  p.x_stride = x_stride;
  p.y = y;
  p.y_stride = y_stride;
  for (int i = 0; i < 16; ++i) {
    p.iq4nl[i / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(quant::kKvaluesIq4nl[i]))
                      << (8 * (i % 4));
  }
  if (const KernelStatus s = SetGridTables(type, &p); s != KernelStatus::kOk) return s;
  *out_params = p;
  return KernelStatus::kOk;
}

}  // namespace gemv_internal

KernelStatus ValidateGemvIndexedCuda(const GemvIndexedCudaArgs& a) {
  if (!GemvCudaSupports(a.type)) return KernelStatus::kUnsupportedType;
  if (a.w == nullptr || a.y == nullptr || a.ids == nullptr ||
      (!a.x_prequantized && a.x == nullptr)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.in <= 0 || a.out <= 0 || a.n_matrices <= 0 || a.groups < 1 || a.groups > 65535 ||
      a.x_group_div < 1 || a.x_rows != (a.groups + a.x_group_div - 1) / a.x_group_div) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.in % TypeInfo(a.type).block_elems != 0) return KernelStatus::kInvalidArgument;
  // Matrices one after another (experts), or column slices of one matrix's rows (a K-split:
  // each slice `in` wide, the last one ending inside the row).
  const bool stacked = a.w_matrix_bytes >= a.out * a.w_row_bytes;
  const bool column_slices =
      (a.n_matrices - 1) * a.w_matrix_bytes + RowBytes(a.type, a.in) <= a.w_row_bytes;
  if (a.w_row_bytes < RowBytes(a.type, a.in) || a.w_row_bytes % 16 != 0 ||
      !(stacked || column_slices) || a.w_matrix_bytes % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.w) % 16 != 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (!a.x_prequantized &&
      (a.x_stride < a.in || a.x_stride % 4 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.y_stride < a.out) return KernelStatus::kInvalidArgument;
  const bool grouped = a.slot_matrix != nullptr;
  if (grouped &&
      (a.slot_begin == nullptr || a.group_order == nullptr || a.slots < 1 || a.slots > 65535)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.scratch == nullptr || reinterpret_cast<uintptr_t>(a.scratch) % 16 != 0 ||
      a.scratch_bytes < GemvCudaScratchBytes(a.in, a.x_rows) ||
      reinterpret_cast<uintptr_t>(a.x_q8) % 16 != 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.out > int64_t{0x7FFFFFFF} * kWarpsPerBlock) return KernelStatus::kTooLarge;
  return KernelStatus::kOk;
}

namespace {

// The indexed / grouped fields of GemvParams (one activation row per group).
void SetIndexedFields(const GemvIndexedCudaArgs& a, GemvParams* p) {
  p->rows = 1;
  p->matrix_ids = a.ids;
  p->w_matrix_bytes = a.w_matrix_bytes;
  p->n_matrices = a.n_matrices;
  p->x_group_div = static_cast<int>(a.x_group_div);
  p->slot_matrix = a.slot_matrix;
  p->slot_begin = a.slot_begin;
  p->group_order = a.group_order;
}

// The grouped F16 GEMM (gemv_cuda_internal.h): x converted into the scratch as F16 (unless the
// previous call on it did), then the GEMM over the slots.
KernelStatus LaunchGroupedF16(const GemvIndexedCudaArgs& a, gemv_internal::GemvParams p,
                              cudaStream_t stream) {
  auto* xh = static_cast<uint16_t*>(a.scratch);
  p.xh = xh;
  cudaError_t err = cudaSuccess;
  if (!a.x_prequantized) {
    gemv_internal::GemvParams q = p;
    q.rows = static_cast<int>(a.x_rows);
    err = gemv_internal::LaunchConvertActivationsF16(q, xh, stream);
  }
  if (err == cudaSuccess) {
    SetIndexedFields(a, &p);
    err = gemv_internal::LaunchGemmF16Grouped(a.type, p, a.slots, stream);
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

// Many groups per matrix (a prefill): the tensor-core grouped kernels where they apply.
// STEPSERVE_GROUPED_GEMM=2: at any number of groups per matrix (to measure the grouped GEMM
// against the dp4a grouped GEMV at decode batch sizes).
bool ManyGroupsPerMatrix(const GemvIndexedCudaArgs& a) {
  const int64_t matrices = a.slots < a.n_matrices ? a.slots : a.n_matrices;
  const int grouped_gemm = gemv_internal::GroupedGemmSetting().load(std::memory_order_relaxed);
  return a.slot_matrix != nullptr &&
         (grouped_gemm == static_cast<int>(GroupedGemmMode::kAlways) || a.grouped_f16_any_rows ||
          a.groups >= gemv_internal::kGroupedMmaMinPairs * matrices);
}

}  // namespace

bool GemvIndexedCudaTakesGroupedF16(const GemvIndexedCudaArgs& a) {
  return ManyGroupsPerMatrix(a) &&
         gemv_internal::GroupedGemmSetting().load(std::memory_order_relaxed) != 0 &&
         gemv_internal::GroupedGemmF16Applies(a.type, a.in, a.slots) &&
         a.scratch_bytes >= GemvIndexedCudaScratchBytes(a.in, a.x_rows);
}

bool GemvIndexedCudaTakesMatrixPair(const GemvIndexedCudaArgs& a) {
  if (a.w2 == nullptr || a.y2 == nullptr || a.slot_matrix == nullptr || 2 * a.slots > 65535 ||
      reinterpret_cast<uintptr_t>(a.w2) % 16 != 0 || ManyGroupsPerMatrix(a) ||
      GemvIndexedCudaTakesGroupedF16(a) || !gemv_internal::GroupedTakesMatrixPair(a.type, a.in)) {
    return false;
  }
  // y2's rows may not overlap y's: whole rows apart, at least `groups` of them.
  const int64_t floats = a.y2 - a.y;
  const int64_t rows = floats / a.y_stride;
  return floats % a.y_stride == 0 && (rows >= a.groups || rows <= -a.groups);
}

KernelStatus GemvIndexedCuda(const GemvIndexedCudaArgs& a, cudaStream_t stream) {
  const KernelStatus status = ValidateGemvIndexedCuda(a);
  if (status != KernelStatus::kOk) return status;
  const bool pair = a.w2 != nullptr || a.y2 != nullptr;
  if (pair && !GemvIndexedCudaTakesMatrixPair(a)) return KernelStatus::kInvalidArgument;
  GemvParams p;
  if (const KernelStatus s = gemv_internal::MakeGemvParams(a.type, a.w, a.w_row_bytes, a.in, a.out,
                                                           a.x, a.x_stride, a.y, a.y_stride, &p);
      s != KernelStatus::kOk) {
    return s;
  }
  auto* base = static_cast<uint8_t*>(a.scratch);
  if (GemvIndexedCudaTakesGroupedF16(a)) return LaunchGroupedF16(a, p, stream);
  const bool given_q8 = a.x_q8 != nullptr;
  const uint8_t* q8 = given_q8 ? static_cast<const uint8_t*>(a.x_q8) : base;
  p.xq = reinterpret_cast<const int8_t*>(q8);
  p.xd = reinterpret_cast<const float2*>(q8 + gemv_internal::Q8ScalesOffset(a.in, a.x_rows));
  const bool quantized = a.x_prequantized || given_q8;
  cudaError_t err = cudaSuccess;
  if (!quantized) {
    GemvParams q = p;
    q.rows = static_cast<int>(a.x_rows);
    err = gemv_internal::LaunchQuantizeQ8(q, const_cast<int8_t*>(p.xq), const_cast<float2*>(p.xd),
                                          stream);
  }
  SetIndexedFields(a, &p);
  if (pair) {
    p.w2 = static_cast<const uint8_t*>(a.w2);
    p.y2_row_offset = (a.y2 - a.y) / a.y_stride;
    p.w2_first_slot = static_cast<int>(a.slots);
  }
  const auto status_of = [](cudaError_t e) {
    if (e == cudaSuccess) return KernelStatus::kOk;
    (void)cudaGetLastError();
    return KernelStatus::kInvalidArgument;
  };
  if (err != cudaSuccess) return status_of(err);
  // The launchers tried in order; cudaErrorNotSupported (nothing launched) passes to the next.
  // Many groups per matrix (a prefill): the tensor-core grouped kernels. A few (decode batches):
  // the dp4a grouped GEMV. (A tensor-core grouped GEMV for decode batches - chunks of 8 pairs as
  // one MMA column tile, whole 16-row tiles per warp - lost to it at every batch on the H100,
  // session 25, 24 layers IQ4_XS, 8 / 16 / 32 / 64 streams: 12.03-12.09 / 16.92 / 26.88-26.90 /
  // 38.27-38.31 ms per step against 8.40-8.43 / 12.50-12.56 / 22.39-22.50 / 34.30-34.32; 8 or 48
  // CTAs per slot at 64 streams 40.97 / 36.28. Removed.)
  if (ManyGroupsPerMatrix(a)) {
    err = gemv_internal::LaunchGemmQ8xMmaGrouped(a.type, p, a.slots, stream);
    if (err == cudaErrorNotSupported) {
      err = gemv_internal::LaunchGemvQ8xMmaGrouped(a.type, p, a.slots, stream);
    }
    if (err != cudaErrorNotSupported) return status_of(err);
  }
  return status_of(
      a.slot_matrix != nullptr
          ? gemv_internal::LaunchGemvQ8xGrouped(a.type, p, a.slots,
                                                /*overlap_previous=*/!quantized, stream)
          : gemv_internal::LaunchGemvQ8xIndexed(a.type, p, a.groups,
                                                /*overlap_previous=*/!quantized, stream));
}

GroupedGemmF16Mode SetGroupedGemmF16Cuda(GroupedGemmF16Mode mode) {
  return static_cast<GroupedGemmF16Mode>(
      gemv_internal::GroupedGemmF16Setting().exchange(static_cast<int>(mode)));
}

bool GroupedGemmF16Enabled(GgmlType type) {
  return gemv_internal::GroupedGemmSetting().load(std::memory_order_relaxed) != 0 &&
         gemv_internal::GroupedGemmF16Applies(type, 256, 1);
}

GroupedGemmMode SetGroupedGemmCuda(GroupedGemmMode mode) {
  return static_cast<GroupedGemmMode>(
      gemv_internal::GroupedGemmSetting().exchange(static_cast<int>(mode)));
}

GemvStreamMode SetGemvCudaStreamMode(GemvStreamMode mode) {
  return static_cast<GemvStreamMode>(
      gemv_internal::GemvStreamModeSetting().exchange(static_cast<int>(mode)));
}

KernelStatus GemvCuda(const GemvCudaArgs& a, cudaStream_t stream) {
  const KernelStatus status = ValidateGemvCuda(a);
  if (status != KernelStatus::kOk) return status;
  GemvParams p;
  if (const KernelStatus s = gemv_internal::MakeGemvParams(a.type, a.w, a.w_row_bytes, a.in, a.out,
                                                           a.x, a.x_stride, a.y, a.y_stride, &p);
      s != KernelStatus::kOk) {
    return s;
  }
  p.rows = static_cast<int>(a.rows);
  cudaError_t err = cudaSuccess;
  if (a.activations == GemvCudaActivations::kF32) {
    err = gemv_internal::LaunchGemvF32x(a.type, p, stream);
  } else {
    auto* base = static_cast<uint8_t*>(a.scratch);
    auto* xq = reinterpret_cast<int8_t*>(base);
    auto* xd = reinterpret_cast<float2*>(base + gemv_internal::Q8ScalesOffset(a.in, a.rows));
    p.xq = xq;
    p.xd = xd;
    if (!a.x_prequantized) err = gemv_internal::LaunchQuantizeQ8(p, xq, xd, stream);
    if (err == cudaSuccess) {
      err = gemv_internal::LaunchGemvQ8x(a.type, p, /*overlap_previous=*/!a.x_prequantized, stream);
    }
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // do not leak a launch error into the caller's next check
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
