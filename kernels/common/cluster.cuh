// Thread-block clusters (sm_90): the CTA's rank in its cluster, the cluster-wide barrier and loads
// from another CTA's shared memory (distributed shared memory), for kernels whose CTAs split one
// tile's K range and add their partial sums without a trip through global memory
// (gemv_mma_tall_cuda.cu). Launch such a kernel with LaunchOverlappingCluster (pdl.cuh).
#ifndef STEPSERVE_KERNELS_COMMON_CLUSTER_CUH_
#define STEPSERVE_KERNELS_COMMON_CLUSTER_CUH_

#include <cstdint>

#include "kernels/common/cp_async.cuh"

namespace stepserve::kernels {

__device__ __forceinline__ int ClusterRank() {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return static_cast<int>(r);
}

// Every thread of every CTA of the cluster arrives, then waits for all of them: shared-memory
// writes before it (release) are visible to every CTA of the cluster after it (acquire).
__device__ __forceinline__ void ClusterSync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n\t"
      "barrier.cluster.wait.acquire.aligned;" ::
          : "memory");
#endif
}

// The float4 at `local` (this CTA's shared memory) in the shared memory of cluster CTA `rank`.
__device__ __forceinline__ float4 ClusterLoadFloat4(const float4* local, int rank) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t remote = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(SharedAddress(local)), "r"(rank));
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
#endif
  return v;
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_CLUSTER_CUH_
