// A byte range for a kernel to pull into L2 while it runs (L2Span), and the device helper that does
// it (l2_prefetch.cuh). Host code (the CUDA backend) fills the span; a plain struct so it needs no
// CUDA header.
#ifndef STEPSERVE_KERNELS_COMMON_L2_PREFETCH_H_
#define STEPSERVE_KERNELS_COMMON_L2_PREFETCH_H_

#include <cstdint>

namespace stepserve::kernels {

// data: 16-byte aligned; bytes: a multiple of 16 (MakeL2Span rounds down: a prefetch is a hint,
// a missing tail of under 16 bytes costs nothing). Empty (bytes 0): nothing to do.
struct L2Span {
  const void* data = nullptr;
  uint64_t bytes = 0;
};

// The span of [data, data + bytes) a bulk prefetch may take: empty where data is not 16-byte
// aligned (weights placed by the backend always are).
inline L2Span MakeL2Span(const void* data, uint64_t bytes) {
  if (data == nullptr || reinterpret_cast<uintptr_t>(data) % 16 != 0) return {};
  return {data, bytes / 16 * 16};
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_L2_PREFETCH_H_
