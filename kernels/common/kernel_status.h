// The plain error code every kernel returns (architecture.md section 4: kernels return an error
// code and never abort). The backend turns it into an absl::Status with context.
#ifndef STEPSERVE_KERNELS_COMMON_KERNEL_STATUS_H_
#define STEPSERVE_KERNELS_COMMON_KERNEL_STATUS_H_

namespace stepserve::kernels {

enum class KernelStatus : int {
  kOk = 0,
  kInvalidArgument = 1,  // null pointer, non-positive size, inconsistent shapes or strides
  kUnsupportedType = 2,  // a GGUF block type (or KV dtype) this kernel cannot read
  kOutOfRange = 3,       // a token id, expert id, position or block-table entry out of range
  kTooLarge = 4,         // a size beyond the kernel's fixed on-stack limits
};

inline const char* KernelStatusName(KernelStatus status) {
  switch (status) {
    case KernelStatus::kOk:
      return "ok";
    case KernelStatus::kInvalidArgument:
      return "invalid argument";
    case KernelStatus::kUnsupportedType:
      return "unsupported type";
    case KernelStatus::kOutOfRange:
      return "out of range";
    case KernelStatus::kTooLarge:
      return "too large";
  }
  return "unknown";
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_KERNEL_STATUS_H_
