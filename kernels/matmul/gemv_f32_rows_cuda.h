// The F32 GEMV of 2-16 activation rows that reads each activation row once per K slice (the MoE
// router's 288 x 4096 F32 matrix at 2-16 decode streams): a thread-block cluster per 16 output
// rows splits K, stages its slice of the activation rows in shared memory and adds the slices'
// partial sums in rank order through distributed shared memory (sm_90). Same contract as
// GemvGenericCuda (gemm_cuda.h); exact F32 up to the accumulation order, deterministic.
#ifndef STEPSERVE_KERNELS_MATMUL_GEMV_F32_ROWS_CUDA_H_
#define STEPSERVE_KERNELS_MATMUL_GEMV_F32_ROWS_CUDA_H_

#include <cuda_runtime_api.h>

#include "kernels/common/kernel_status.h"
#include "kernels/matmul/gemm_cuda.h"

namespace stepserve::kernels {

// On unless STEPSERVE_GEMV_F32_ROWS=0 (read once): GemvGenericCuda sends the calls
// GemvF32RowsTakes accepts here (docs/cuda-engine.md's switch table).
bool GemvF32RowsEnabled();

// F32 weights, 2..16 rows, `in` a multiple of 4, weight rows and activation rows 16-byte aligned.
bool GemvF32RowsTakes(const MatmulCudaArgs& args);

// Validates (ValidateMatmulCuda, then GemvF32RowsTakes: kInvalidArgument when it declines), then
// enqueues one kernel on `stream`.
KernelStatus GemvF32RowsCuda(const MatmulCudaArgs& args, cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MATMUL_GEMV_F32_ROWS_CUDA_H_
