// RunDenseGrouped (dense_grouped_matmul.h): dense matmuls of a few dozen rows through the grouped
// F16 GEMM of the MoE prefill, as one slot or as K slices.
#include "engine/backend/cuda/dense_grouped_matmul.h"

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "engine/base/status_macros.h"
#include "engine/quant/ggml_type.h"
#include "kernels/common/env_switch.h"
#include "kernels/matmul/gemm_cuda.h"
#include "kernels/matmul/matmul_cuda.h"

namespace stepserve {
namespace {

// Dense matmuls of DenseGroupedMinRows (IQ4_XS 17, Q4_K / Q6_K 9; session 28: past the GEMVs'
// 32 / 16) to kDenseGroupedMaxRows rows through the grouped F16 GEMM of the MoE prefill
// (matmul_cuda.h GemvIndexedCuda) as one slot holding every row, instead of cuBLAS on a dequantized
// F16 tile. Why: from 33 decode streams the attention projections took the tile path every step -
// the F16 tile written and read back moves ~4.5 bytes per IQ4_XS weight against 0.53 read in place
// (~190 us of a ~1.25 ms layer at 64 streams on the H100, session 26's estimate).
// STEPSERVE_DENSE_GROUPED_F16 (read once): `2` (the default) matrices of >= 64 tiles of 128 outputs
// as one slot, narrower ones (the o projection, 4096 outputs) split over K (DenseKParts); `1` the
// wide ones only; `0` off (cuBLAS). Measured on the H100 (session 28, results-v25.txt calls 1-3; 24
// layers, alternating rounds, ms per step): IQ4_XS 33 / 64 streams 21.83 / 29.80 and 21.93 / 29.96
// -> 19.56 / 27.73 and 19.66 / 27.75 with `1` -> 18.49 / 26.67 and 18.59 / 26.66 with `2` (-15% /
// -11%); 20 / 24 / 32 / 48 streams (the Q6_K LM head from 17 rows) 17.06 / 18.53, 22.09 / 25.96
// -> 15.93 / 17.43, 20.90 / 22.59; the Q4_K_M mix (its Q4_K attention matrices from 17 rows) 20 /
// 32 / 64 streams 21.68 / 25.93 / 36.76 -> 15.76 / 20.06 / 31.98. matmul_backend_cuda_test and
// model_cuda_test pass.
constexpr int64_t kDenseGroupedMaxRows = 64;
constexpr int kDenseMaxParts = 8;

int DenseGroupedF16() {
  static const int setting = kernels::EnvSwitchLevel("STEPSERVE_DENSE_GROUPED_F16", 2);
  return setting;
}

// The GEMM's grid is a CTA per 128 output rows per slot, each walking its slot's K. A matrix of
// fewer than 64 such tiles leaves most SMs idle (the o projection, 4096 x 8192: 32 CTAs), so from
// 64 tiles on it runs as one slot; under `2` a narrower one as `parts` slots, slot p the columns
// [p in / parts, (p + 1) in / parts) of every row (column-slice matrices, matmul_cuda.h), each
// writing its partial product, summed in a fixed order after (SumPartsCuda). Parts: the fewest
// (2, 4, 8) that reach 96 CTAs. 0 when neither applies: X not contiguous (a slice of X's rows is
// then not a row of a narrower X), slices that are not whole 256-value blocks or 16-byte aligned
// (cp.async), or under 64 CTAs even at 8 parts.
int DenseKParts(const kernels::MatmulArgs& m) {
  const int64_t tiles = (m.out + 127) / 128;
  if (tiles >= 64) return 1;
  if (DenseGroupedF16() < 2 || m.x_stride != m.in) return 0;
  int parts = 2;
  while (parts < kDenseMaxParts && tiles * parts < 96) parts *= 2;
  if (tiles * parts < 64 || m.in % (256 * parts) != 0 || RowBytes(m.type, m.in / parts) % 16 != 0) {
    return 0;
  }
  return parts;
}

// Where the index arrays of a one-slot (parts 1) or K-split (2, 4, 8 parts) grouping of r rows lie
// in one device array (DenseIndex::host, uploaded once, so every row count is served inside
// recorded step graphs too). Group g = parts i + p is row i's part p: it reads X "row" g of
// in / parts values (X contiguous) and writes partial row g; slot p lists groups p, parts + p, ..
// and reads matrix p.
struct DenseIndex {
  std::vector<int32_t> host;
  int64_t matrix_at[4] = {};                            // by log2(parts): 0, 1, .. parts - 1
  int64_t bounds_at[4][kDenseGroupedMaxRows + 1] = {};  // slot bounds {0, r, 2 r, .., parts r}
  int64_t order_at[4][kDenseGroupedMaxRows + 1] = {};   // group order, parts r entries
};

const DenseIndex& DenseIndexTable() {
  static const DenseIndex* table = [] {
    auto* t = new DenseIndex;
    for (int li = 0; li < 4; ++li) {
      const int parts = 1 << li;
      t->matrix_at[li] = static_cast<int64_t>(t->host.size());
      for (int p = 0; p < parts; ++p) t->host.push_back(p);
      for (int64_t r = 1; r <= kDenseGroupedMaxRows; ++r) {
        t->bounds_at[li][r] = static_cast<int64_t>(t->host.size());
        for (int p = 0; p <= parts; ++p) t->host.push_back(static_cast<int32_t>(p * r));
        t->order_at[li][r] = static_cast<int64_t>(t->host.size());
        for (int p = 0; p < parts; ++p) {
          for (int64_t i = 0; i < r; ++i) t->host.push_back(static_cast<int32_t>(parts * i + p));
        }
      }
    }
    return t;
  }();
  return *table;
}

}  // namespace

absl::StatusOr<bool> RunDenseGrouped(CudaBackend& backend, DenseGroupedScratch scratch,
                                     const kernels::MatmulArgs& m, const char* op) {
  // The types measured (the 2-3 bit types' decoders also serve the grouped GEMM, but their dense
  // matmuls keep cuBLAS until measured); Q5_K while the grouped F16 GEMM takes it (unless
  // STEPSERVE_Q5K_GROUPED_F16=0; session 37).
  const bool measured_type =
      m.type == GgmlType::kIQ4_XS || m.type == GgmlType::kQ4_K || m.type == GgmlType::kQ6_K ||
      (m.type == GgmlType::kQ5_K && kernels::GroupedGemmF16Enabled(GgmlType::kQ5_K));
  if (DenseGroupedF16() == 0 || !measured_type || m.rows > kDenseGroupedMaxRows ||
      !DenseGroupedTakesRows(m)) {
    return false;
  }
  const int parts = DenseKParts(m);
  if (parts == 0) return false;
  const DenseIndex& table = DenseIndexTable();
  if (!scratch.index.staged_valid) {
    // Uploaded outside step recording only (a copy would end the recording); until then the
    // caller's path serves.
    if (backend.recording_step()) return false;
    RETURN_IF_ERROR(backend
                        .StageToDevice(scratch.index, table.host.data(),
                                       table.host.size() * sizeof(int32_t), "dense grouping")
                        .status());
  }
  // Partial products of a K-split: sized once for the largest (parts x out < 192 x 128, since
  // parts is the fewest reaching 96 tiles), so the area never moves (a moved scratch invalidates
  // recorded step graphs).
  constexpr int64_t kMaxPartialFloats = kDenseGroupedMaxRows * 192 * 128;
  if (parts > 1 && scratch.parts.bytes < kMaxPartialFloats * sizeof(float)) {
    if (backend.recording_step()) return false;
    RETURN_IF_ERROR(
        backend.EnsureScratch(scratch.parts, kMaxPartialFloats * sizeof(float), op).status());
  }
  int li = 0;
  while ((1 << li) < parts) ++li;
  const auto* index = static_cast<const int32_t*>(scratch.index.data);
  kernels::GemvIndexedCudaArgs g;
  g.type = m.type;
  g.w = m.w;
  g.w_row_bytes = m.w_row_bytes;
  g.in = m.in / parts;
  g.out = m.out;
  g.w_matrix_bytes = parts == 1 ? m.out * m.w_row_bytes : RowBytes(m.type, g.in);
  g.n_matrices = parts;
  g.ids = index + table.matrix_at[li];  // not read: the grouping below replaces it
  g.groups = parts * m.rows;
  g.x = m.x;
  g.x_stride = parts == 1 ? m.x_stride : g.in;
  g.x_rows = g.groups;
  g.y = parts == 1 ? m.y : static_cast<float*>(scratch.parts.data);
  g.y_stride = parts == 1 ? m.y_stride : m.out;
  g.slot_matrix = index + table.matrix_at[li];
  g.slot_begin = index + table.bounds_at[li][m.rows];
  g.group_order = index + table.order_at[li][m.rows];
  g.slots = parts;
  // One slot per K part: with fewer than kGroupedMmaMinPairs rows (the head switch's 2-8) the
  // grouped GEMM must still take it.
  g.grouped_f16_any_rows = true;
  g.scratch = scratch.x.data;
  g.scratch_bytes = static_cast<int64_t>(scratch.x.bytes);
  const int64_t need = kernels::GemvIndexedCudaScratchBytes(g.in, g.x_rows);
  if (g.scratch_bytes < need) {
    // Sized for kDenseGroupedMaxRows at once, so the area does not move between row counts (a
    // moved scratch invalidates recorded step graphs); the cuBLAS path shares it. The F16 and
    // int8 copies of X are the same size however K is split.
    if (backend.recording_step()) return false;
    ASSIGN_OR_RETURN(
        g.scratch,
        backend.EnsureScratch(
            scratch.x, kernels::GemvIndexedCudaScratchBytes(m.in, kDenseGroupedMaxRows), op));
    g.scratch_bytes = static_cast<int64_t>(scratch.x.bytes);
  }
  if (kernels::ValidateGemvIndexedCuda(g) != kernels::KernelStatus::kOk ||
      !kernels::GemvIndexedCudaTakesGroupedF16(g)) {
    return false;
  }
  RETURN_IF_ERROR(backend.KernelResult(kernels::GemvIndexedCuda(g, backend.stream()), op));
  if (parts > 1) {
    RETURN_IF_ERROR(backend.KernelResult(
        kernels::SumPartsCuda(g.y, parts, /*part_stride=*/m.out, /*row_stride=*/parts * m.out,
                              m.rows, m.out, m.y, m.y_stride, backend.stream()),
        op));
  }
  return true;
}

// From how many rows the dense grouped GEMM takes a matrix of `type`, ahead of the GEMVs.
// Defaults: IQ4_XS from 17 rows (instead of the wide tensor-core GEMV at 17-32), Q4_K and Q6_K
// from 9 (instead of the dp4a GEMV at 9-16). Measured on the H100 (session 29, results-v26.txt
// calls 1-2; 24 layers, two rounds, ms per step) with the rows from 9: IQ4_XS 20 / 24 / 32
// streams 15.89 / 17.44 / 20.98 and 15.82 / 17.33 / 20.91 -> 13.61 / 15.07 / 17.67 and 13.63 /
// 15.19 / 17.64 (-14% / -13% / -16%), but 12 streams 10.41 / 10.37 -> 10.55 / 10.55 (+1.5%: the
// 16-row tensor-core GEMV stays) and 8 streams 8.31 -> 8.35; the Q4_K_M mix 12 / 16 streams
// 19.70 / 18.78 -> 16.44 / 14.15 (-17% / -25%), 8 streams 12.90 -> 12.89. The matmul layout cases
// at 16, 17 and 32 rows and the dense grouped ones pass with it; as the default (call 4) the
// matmul tests (133) and model_cuda_test (13) pass and IQ4_XS 12 / 16 streams also gain (-5%: the
// recipe's Q6_K LM head), Q4_K_M 12 / 16 / 24 streams -17% / -24% / -1%.
// STEPSERVE_DENSE_GROUPED_MIN_ROWS (read once): N (2-64) for every type; 0 past the GEMVs' row
// limits (IQ4_XS 33, the K-quants 17: session 28's default).
int64_t DenseGroupedMinRows(GgmlType type) {
  static const int64_t env_rows = [] {
    const char* v = std::getenv("STEPSERVE_DENSE_GROUPED_MIN_ROWS");
    if (v == nullptr || v[0] == '\0') return int64_t{-1};
    const int64_t n = std::atoll(v);
    return n >= 2 && n <= kDenseGroupedMaxRows ? n : int64_t{0};
  }();
  if (env_rows > 0) return env_rows;
  const int64_t past_gemvs = kernels::GemvCudaMaxRows(type, kernels::GemvCudaActivations::kQ8) + 1;
  if (env_rows == 0) return past_gemvs;
  if (type == GgmlType::kQ5_K && !kernels::GroupedGemmF16Enabled(type)) return past_gemvs;
  if (type == GgmlType::kIQ4_XS) return 17;
  if (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K) return 9;
  return past_gemvs;
}

bool DenseGroupedTakesRows(const kernels::MatmulArgs& m) {
  static const bool head = kernels::EnvSwitchOn("STEPSERVE_DENSE_GROUPED_HEAD");
  constexpr int64_t kHeadMinBytes = int64_t{64} << 20;
  // From 4 rows (H100, 24 layers, session 38, two alternating rounds against the GEMV: 4 / 8
  // streams 4.930 / 4.872 and 7.454 / 7.411 ms against 4.944 / 4.947 and 7.755 / 7.619); at 2
  // rows it lost (3.220 / 3.194 against 3.176 / 3.175).
  constexpr int64_t kHeadMinRows = 4;
  if (head && m.type == GgmlType::kQ6_K && m.rows >= kHeadMinRows &&
      m.out * m.w_row_bytes >= kHeadMinBytes) {
    return true;
  }
  return m.rows >= DenseGroupedMinRows(m.type);
}

}  // namespace stepserve
