// Arrival counters for "the last one to arrive finishes the work" (the MoE gate/up kernel's
// 32-row block quantization, the split decode attention's combine): a release add by the arriving
// thread, an acquire fence by whoever saw the last arrival.
//
// Why not __threadfence() around atomicAdd: __threadfence() is fence.sc.gpu (MEMBAR.SC.GPU in
// SASS), a sequentially consistent fence that every arriving warp pays, while the pattern needs
// only release (the arriver's stores - and, being cumulative, those a CTA barrier ordered before
// them - visible before its count) and acquire on the side that saw the last count. In ncu's
// warp samples of the batch-1 gate/up kernel (H100, bench/gpu/results-v21.txt) the fence after
// the value store and the shuffle waiting on the atomic's result held ~20% of the samples.
//
// Measured against the __threadfence() form (session 24's STEPSERVE_ARRIVE_RELEASE=0 build, since
// removed) on the H100 (session 24 call 4, bench/gpu/results-v21.txt; 24 layers IQ4_XS, ms
// per step at 1 / 2 / 4 / 16 streams, two alternating rounds): __threadfence() 2.629 / 3.611 /
// 5.539 / 12.554 and 2.634 / 3.622 / 5.472 / 12.567, release / acquire 2.601 / 3.566 / 5.494 /
// 12.616 and 2.607 / 3.567 / 5.480 / 12.544 (1-2 streams -1.1% / -1.4%, 4-16 within the spread);
// the MoE GEMV (decode cases), MoE, attention and whole-model GPU tests pass with it.
#ifndef STEPSERVE_KERNELS_COMMON_ARRIVAL_CUH_
#define STEPSERVE_KERNELS_COMMON_ARRIVAL_CUH_

namespace stepserve::kernels {

// Adds `amount` to *counter (global memory) after this thread's earlier writes, and those ordered
// before them (a CTA barrier's), are visible at GPU scope; returns the previous count.
__device__ __forceinline__ int ArriveRelease(int* counter, int amount = 1) {
  int previous;
  asm volatile("atom.release.gpu.global.add.s32 %0, [%1], %2;"
               : "=r"(previous)
               : "l"(counter), "r"(amount)
               : "memory");
  return previous;
}

// After seeing the last arrival (directly or through a shuffle or barrier from the thread that
// saw it): the other arrivers' writes before their ArriveRelease are visible to this thread's
// later reads (through L2: __ldcg).
__device__ __forceinline__ void AcquireAfterArrivals() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_ARRIVAL_CUH_
