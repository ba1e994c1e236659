// Byte ranges for a kernel to pull into L2 while it runs (L2Span, L2SpanList), and the device
// helper that does it (l2_prefetch.cuh). Host code (the CUDA backend) fills the span; a plain
// struct so it needs no CUDA header.
#ifndef STEPSERVE_KERNELS_COMMON_L2_PREFETCH_H_
#define STEPSERVE_KERNELS_COMMON_L2_PREFETCH_H_

#include <cstdint>

namespace stepserve::kernels {

// data: 16-byte aligned; bytes: a multiple of 16 (MakeL2Span rounds down: a prefetch is a hint,
// a missing tail of under 16 bytes costs nothing; the line-wise prefetch never reads past the
// span's last 128-byte line, which holds its last byte). Empty (bytes 0): nothing to do.
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

// Up to kMaxL2Spans spans for one kernel to pull in, in the order given (Add drops what does not
// fit: spans past the last slot or past max_bytes in all).
constexpr int kMaxL2Spans = 4;
struct L2SpanList {
  L2Span spans[kMaxL2Spans];
  int count = 0;

  uint64_t bytes() const {
    uint64_t total = 0;
    for (int i = 0; i < count; ++i) total += spans[i].bytes;
    return total;
  }
  // False (nothing added) when the list is full or the span would take it past max_bytes.
  bool Add(L2Span span, uint64_t max_bytes) {
    if (span.bytes == 0 || count == kMaxL2Spans || bytes() + span.bytes > max_bytes) return false;
    spans[count++] = span;
    return true;
  }
};

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_L2_PREFETCH_H_
