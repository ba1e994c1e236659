// PrefetchSpansL2: the threads of a grid split the spans of an L2SpanList (l2_prefetch.h) into
// 128-byte lines, consecutive lines to consecutive threads (a warp's prefetch covers 4 KB), and
// issue one L2 prefetch per line - no register written, nothing to wait for. For weights a later
// kernel reads, pulled in by a kernel of many CTAs that moves few bytes itself (the decode
// attention): HBM would otherwise idle while it runs. Only for data no kernel writes, so it may
// run before the programmatic-launch wait (pdl.cuh).
//
// Not the bulk form (cp.async.bulk.prefetch.L2): issued by the 10-14 CTAs of the rope kernel, the
// bulk prefetch of the output projection slowed a batch-1 H100 step from 2.335 to 2.669-2.693 ms
// (session 35) - a CTA's bulk operations go through its SM's copy unit, a few SMs' worth of rate,
// and the kernel after it waited.
#ifndef STEPSERVE_KERNELS_COMMON_L2_PREFETCH_CUH_
#define STEPSERVE_KERNELS_COMMON_L2_PREFETCH_CUH_

#include <cstdint>

#include "kernels/common/l2_prefetch.h"

namespace stepserve::kernels {

constexpr uint64_t kL2PrefetchLineBytes = 128;

// `worker` in [0, workers): this thread's index among the threads that share the spans.
__device__ __forceinline__ void PrefetchSpansL2(const L2SpanList& list, uint64_t worker,
                                                uint64_t workers) {
  for (int s = 0; s < list.count; ++s) {
    const char* base = static_cast<const char*>(list.spans[s].data);
    const uint64_t lines = (list.spans[s].bytes + kL2PrefetchLineBytes - 1) / kL2PrefetchLineBytes;
    for (uint64_t i = worker; i < lines; i += workers) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(base + i * kL2PrefetchLineBytes));
    }
  }
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_L2_PREFETCH_CUH_
