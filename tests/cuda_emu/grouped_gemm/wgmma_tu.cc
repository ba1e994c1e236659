// The warpgroup-MMA grouped GEMM (kernels/matmul/gemm_grouped_wgmma_cuda.cu, shadowed by
// transform.py) in a translation unit of its own: its anonymous namespace reuses the mma.sync
// kernel file's names, and gemm_grouped_f16_cuda.cu's launchers call into it.
#include "emu_cuda.h"
#include "emu_launch.h"
#include "kernels/matmul/gemm_grouped_wgmma_cuda.cu"
#include "test_common.h"  // the runtime stand-ins the launcher calls
