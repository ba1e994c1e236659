// Dense matmuls of a few dozen rows (IQ4_XS 17-64, Q4_K / Q6_K 9-64: the attention projections,
// the shared expert and the LM head of decode batches) through the grouped F16 GEMM of the MoE
// prefill (kernels/matmul/matmul_cuda.h GemvIndexedCuda) instead of cuBLAS on a dequantized F16
// weight tile: the weights are read in place (0.53 bytes per IQ4_XS weight against ~4.5 for a tile
// written and read back). A matrix of at least 64 tiles of 128 outputs runs as one slot holding
// every row; a narrower one (the o projection) as 2 / 4 / 8 column-slice matrices, one slot each,
// whose partial products are summed in a fixed order after. STEPSERVE_DENSE_GROUPED_F16: 2 (the
// default) both, 1 the one-slot form only, 0 off; docs/cuda-engine.md has the measurements.
#ifndef STEPSERVE_ENGINE_BACKEND_CUDA_DENSE_GROUPED_MATMUL_H_
#define STEPSERVE_ENGINE_BACKEND_CUDA_DENSE_GROUPED_MATMUL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/quant/ggml_type.h"
#include "kernels/matmul/matmul.h"

namespace stepserve {

// The backend's device areas the path uses: the index arrays of every row count and split
// (uploaded once, outside step recording), the partial products of a K-split (allocated once at
// its largest) and X's F16 copy (shared with the cuBLAS path; sized for 64 rows at once). None of
// them moves once set, so recorded step graphs keep their pointers.
struct DenseGroupedScratch {
  CudaBackend::Scratch& index;
  CudaBackend::Scratch& parts;
  CudaBackend::Scratch& x;
};

// y = x W^T (every pointer of `m` in device memory; int8-activation accuracy class, ~5e-4
// relative) through the grouped F16 GEMM when it applies: true when done, false when it does not
// apply (type, row count, layout, or an area that would have to be set up while a step is being
// recorded) and the caller takes another path, an error when a launch failed.
absl::StatusOr<bool> RunDenseGrouped(CudaBackend& backend, DenseGroupedScratch scratch,
                                     const kernels::MatmulArgs& m, const char* op);

// From how many rows RunDenseGrouped takes a matrix of `type` (then tried ahead of the GEMVs):
// IQ4_XS 17, Q4_K, Q5_K and Q6_K 9 (measured: dense_grouped_matmul.cc);
// STEPSERVE_DENSE_GROUPED_MIN_ROWS (read once) N for every type, or 0 for past the GEMVs' row
// limits.
int64_t DenseGroupedMinRows(GgmlType type);

// Whether RunDenseGrouped takes `m`'s row count ahead of the GEMVs: from DenseGroupedMinRows, or
// a Q6_K matrix of at least 64 MB (the LM head) from 4 rows - the warp-per-row GEMV took 314 us
// for it at 4 streams (H100, session 36) where the grouped GEMM took 244 us at 16; measured 0.9%
// / 3.3% faster a step at 4 / 8 streams (session 38). STEPSERVE_DENSE_GROUPED_HEAD=0 (read once)
// keeps the head on the GEMV below DenseGroupedMinRows.
bool DenseGroupedTakesRows(const kernels::MatmulArgs& m);

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_BACKEND_CUDA_DENSE_GROUPED_MATMUL_H_
