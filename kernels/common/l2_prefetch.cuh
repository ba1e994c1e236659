// PrefetchSpanL2: the threads of a grid split an L2Span (l2_prefetch.h) into 16 KB pieces and each
// issues the bulk L2 prefetch of its pieces (cp.async.bulk.prefetch.L2, sm_90: one instruction a
// piece, nothing to wait for, no registers held). For weights a later kernel reads, pulled in by a
// kernel that moves few bytes itself: HBM would otherwise idle while it runs. Only for data no
// kernel writes - it may be called before the programmatic-launch wait (pdl.cuh).
#ifndef STEPSERVE_KERNELS_COMMON_L2_PREFETCH_CUH_
#define STEPSERVE_KERNELS_COMMON_L2_PREFETCH_CUH_

#include <cstdint>

#include "kernels/common/l2_prefetch.h"

namespace stepserve::kernels {

constexpr uint64_t kL2PrefetchPieceBytes = 16 * 1024;

// `worker` in [0, workers): this thread's index among the threads that share the span.
__device__ __forceinline__ void PrefetchSpanL2(const L2Span& span, uint64_t worker,
                                               uint64_t workers) {
  const uint64_t pieces = (span.bytes + kL2PrefetchPieceBytes - 1) / kL2PrefetchPieceBytes;
  for (uint64_t i = worker; i < pieces; i += workers) {
    const uint64_t offset = i * kL2PrefetchPieceBytes;
    const uint64_t left = span.bytes - offset;
    const char* p = static_cast<const char*>(span.data) + offset;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint32_t n =
        static_cast<uint32_t>(left < kL2PrefetchPieceBytes ? left : kL2PrefetchPieceBytes);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n));
#else
    // Older devices: one prefetch per 128-byte line of the piece.
    for (uint64_t line = 0; line < left && line < kL2PrefetchPieceBytes; line += 128) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(p + line));
    }
#endif
  }
}

// Every span of the list, each split over all the workers.
__device__ __forceinline__ void PrefetchSpansL2(const L2SpanList& list, uint64_t worker,
                                                uint64_t workers) {
  for (int i = 0; i < list.count; ++i) PrefetchSpanL2(list.spans[i], worker, workers);
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_L2_PREFETCH_CUH_
