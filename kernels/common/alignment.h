// Pointer alignment checks for the host side of the CUDA launchers: a kernel takes its 16-byte
// (float4 / uint4) loads only where every row start it reads is 16-byte aligned.
#ifndef STEPSERVE_KERNELS_COMMON_ALIGNMENT_H_
#define STEPSERVE_KERNELS_COMMON_ALIGNMENT_H_

#include <cstdint>

namespace stepserve::kernels {

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_ALIGNMENT_H_
