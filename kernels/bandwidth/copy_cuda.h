// A plain device-to-device copy written as a kernel: 16-byte loads and stores, grid-stride. Its
// throughput (bytes read + bytes written per second) is the practical HBM ceiling that the
// memory-bound kernels are measured against (bench/gpu/bench_gemv).
#ifndef STEPSERVE_KERNELS_BANDWIDTH_COPY_CUDA_H_
#define STEPSERVE_KERNELS_BANDWIDTH_COPY_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

// Copies `bytes` (a multiple of 16) from `src` to `dst` (device, 16-byte aligned, not
// overlapping) on `stream` with `blocks` x 256 threads (0: four blocks per multiprocessor).
KernelStatus CopyCuda(void* dst, const void* src, int64_t bytes, int blocks, cudaStream_t stream);

// Reads `bytes` (a multiple of 16) at `src` (device, 16-byte aligned) with 16-byte loads, four
// blocks of 256 threads per multiprocessor, and writes nothing but (practically never) one word
// at `sink`: the time a kernel needs just to stream that many bytes, launch and ramp included.
KernelStatus ReadCuda(const void* src, int64_t bytes, uint32_t* sink, cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_BANDWIDTH_COPY_CUDA_H_
