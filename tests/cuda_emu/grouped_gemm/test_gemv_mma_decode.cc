// The tensor-core grouped GEMV for decode batches (GemvMmaIq4XsDecodeGroupedKernel in
// kernels/matmul/gemv_mma_cuda.cu, through LaunchGemvQ8xMmaDecodeGrouped with at most 2 CTAs per
// slot, so warps loop over 16-row tiles) under the host emulator, on test_gemv_grouped.cc's IQ4_XS
// cases: 1-9 groups per slot (chunks of 8), rows of 5-40 blocks, tiles past `out`, unused and
// out-of-range slots, x_group_div 1 and 8; y against the double reference, padding untouched.
//   test_gemv_mma_decode [copy_at_issue 0|1] [seed] [only_case]
#define EMU_GROUPED_MMA_DECODE 1
#include "test_gemv_grouped.cc"
