// The q/k norm + RoPE and KV append sources (QkNormRopeAppendCuda and the kernels it validates
// with) in a translation unit of their own, so their file-local names cannot collide with the
// attention kernel's in emu_test.cc. The launch side is emu_pdl.h's inline pieces only; the
// runtime calls of emu_launch.h are defined once, in emu_test.cc's unit. Verification harness only.
#include "emu_cuda.h"
#include "emu_pdl.h"
#include "emu_rounding.h"

// Static shared arrays: one instance for all the coroutine threads of a CTA (CTAs run one at a
// time), as on the device.
#undef __shared__
#define __shared__ static
#include "kernel_emu.inc"
#include "kernels/attention/kv_append_rope_cuda.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/rope/rope_cuda.h"
