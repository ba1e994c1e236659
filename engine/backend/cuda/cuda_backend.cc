// CudaBackend: device selection, the stream, memory and weight placement, and registration.
#include "engine/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/env_switch.h"

namespace stepserve {
namespace {

std::string Gib(uint64_t bytes) { return absl::StrFormat("%.2f GiB", bytes / double(1ull << 30)); }

// STEPSERVE_CUDA_POISON=<byte> (e.g. 0x3c, 0xff; read once; unset: off): a diagnostic. Every fresh
// device allocation - buffers, scratch areas, the step input area, weights before their bytes land
// (so the row padding keeps it) - is filled with that byte first. cudaMalloc hands back memory an
// earlier allocation of the process wrote, so a kernel that reads bytes nobody wrote sees whatever
// ran before it: results that change with what an earlier test did. Poisoned, such a read gives
// the same wrong answer in every run.
int PoisonByte() {
  static const int byte = [] {
    const char* v = std::getenv("STEPSERVE_CUDA_POISON");
    if (v == nullptr || v[0] == '\0') return -1;
    return static_cast<int>(std::strtol(v, nullptr, 0) & 0xff);
  }();
  return byte;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CudaBackend::Create(const BackendOptions& options) {
  const int count = kernels::CudaDeviceCount();
  if (count == 0) {
    return absl::FailedPreconditionError(
        "cuda backend: no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES)");
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cuda backend: device %d does not exist (%d visible)", options.device, count));
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend());
  backend->device_ = options.device;
  backend->exact_activations_ = options.exact_activations;
  if (const char* env = std::getenv("STEPSERVE_CUDA_GRAPHS"); env != nullptr) {
    backend->graphs_enabled_ = std::string_view(env) != "0";
  }
  backend->concurrent_matmuls_ = kernels::EnvSwitchOn("STEPSERVE_CONCURRENT_MATMULS");
  backend->side_shared_expert_ = kernels::EnvSwitchOn("STEPSERVE_SIDE_SHARED_EXPERT");
  RETURN_IF_ERROR(backend->CudaResult(cudaSetDevice(options.device), "cudaSetDevice"));
  RETURN_IF_ERROR(backend->CudaResult(
      cudaStreamCreateWithFlags(&backend->stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  return std::unique_ptr<Backend>(std::move(backend));
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (side_stream_ != nullptr) cudaStreamSynchronize(side_stream_);
  pointwise_.reset();
  attention_.reset();
  matmul_.reset();
  for (void* p : placed_) cudaFree(p);
  if (side_fork_ != nullptr) cudaEventDestroy(side_fork_);
  if (side_join_ != nullptr) cudaEventDestroy(side_join_);
  if (side_stream_ != nullptr) cudaStreamDestroy(side_stream_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaBackend::CudaResult(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();  // clear a non-sticky error so it does not leak into the next check
  if (err == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(kernels::CudaErrorText(what, err));
  }
  return absl::InternalError(kernels::CudaErrorText(what, err));
}

absl::Status CudaBackend::KernelResult(kernels::KernelStatus status, const char* op) {
  const std::string message =
      absl::StrFormat("%s: kernel reported %s", op, kernels::KernelStatusName(status));
  switch (status) {
    case kernels::KernelStatus::kOk:
      return CudaResult(cudaGetLastError(), op);
    case kernels::KernelStatus::kOutOfRange:
      return absl::OutOfRangeError(message);
    case kernels::KernelStatus::kUnsupportedType:
      return absl::UnimplementedError(message);
    case kernels::KernelStatus::kTooLarge:
      return absl::ResourceExhaustedError(message);
    case kernels::KernelStatus::kInvalidArgument:
      break;
  }
  return absl::InvalidArgumentError(message);
}

absl::StatusOr<void*> CudaBackend::EnsureScratch(Scratch& scratch, size_t bytes, const char* what) {
  if (scratch.bytes >= bytes && scratch.data != nullptr) return scratch.data;
  scratch.staged_valid = false;
  ++scratch_epoch_;
  if (scratch.data != nullptr) {
    RETURN_IF_ERROR(CudaResult(cudaStreamSynchronize(stream_), what));
    cudaFree(scratch.data);
    scratch.data = nullptr;
    scratch.bytes = 0;
  }
  const size_t grown = std::max<size_t>(bytes, 256);
  void* data = nullptr;
  cudaError_t err = cudaMalloc(&data, grown);
  if (err != cudaSuccess) {
    return CudaResult(err, absl::StrFormat("%s: scratch of %d bytes", what, grown).c_str());
  }
  scratch.data = data;
  scratch.bytes = grown;
  RETURN_IF_ERROR(PoisonFresh(data, grown, what));
  return data;
}

absl::StatusOr<void*> CudaBackend::StageToDevice(Scratch& scratch, const void* host, size_t bytes,
                                                 const char* what) {
  if (recording_step()) {
    return AbandonRecording(absl::StrFormat("%s is not part of the step description", what));
  }
  if (scratch.staged_valid && scratch.data != nullptr && scratch.staged.size() == bytes &&
      (bytes == 0 || std::memcmp(scratch.staged.data(), host, bytes) == 0)) {
    return scratch.data;  // the device copy already holds these bytes
  }
  ASSIGN_OR_RETURN(void* dst, EnsureScratch(scratch, bytes, what));
  if (bytes == 0) return dst;
  if (host == nullptr) return absl::InvalidArgumentError(absl::StrFormat("%s: null source", what));
  if (scratch.copied != nullptr) {
    // The previous copy out of the pinned buffer must have left it before it is overwritten.
    RETURN_IF_ERROR(CudaResult(TimedWait(nullptr, scratch.copied), what));
  } else {
    RETURN_IF_ERROR(
        CudaResult(cudaEventCreateWithFlags(&scratch.copied, cudaEventDisableTiming), what));
  }
  if (scratch.pinned_bytes < bytes) {
    if (scratch.pinned != nullptr) cudaFreeHost(scratch.pinned);
    scratch.pinned = nullptr;
    scratch.pinned_bytes = 0;
    const size_t grown = std::max<size_t>(bytes, 4096);
    RETURN_IF_ERROR(CudaResult(cudaHostAlloc(&scratch.pinned, grown, cudaHostAllocDefault), what));
    scratch.pinned_bytes = grown;
  }
  std::memcpy(scratch.pinned, host, bytes);
  RETURN_IF_ERROR(CudaResult(
      cudaMemcpyAsync(dst, scratch.pinned, bytes, cudaMemcpyHostToDevice, stream_), what));
  RETURN_IF_ERROR(CudaResult(cudaEventRecord(scratch.copied, stream_), what));
  const uint8_t* src = static_cast<const uint8_t*>(host);
  scratch.staged.assign(src, src + bytes);
  scratch.staged_valid = true;
  return dst;
}

absl::StatusOr<BackendBuffer> CudaBackend::Allocate(size_t bytes) {
  ForgetPrequantized();
  void* data = nullptr;
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  cudaError_t err = cudaMalloc(&data, rounded);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    const BackendMemoryInfo info = memory_info();
    return absl::ResourceExhaustedError(
        absl::StrFormat("cuda backend: cannot allocate %d bytes (%s) on device %d: %s free of %s",
                        bytes, Gib(bytes), device_, Gib(info.free_bytes), Gib(info.total_bytes)));
  }
  buffer_bytes_->fetch_add(rounded);
  std::shared_ptr<std::atomic<uint64_t>> counter = buffer_bytes_;
  BackendBuffer buffer(data, bytes, [counter, rounded](void* p) {
    counter->fetch_sub(rounded);
    cudaFree(p);
  });
  RETURN_IF_ERROR(PoisonFresh(data, rounded, "Allocate"));
  return buffer;
}

absl::Status CudaBackend::Upload(const void* host, void* dst, size_t bytes) {
  ForgetPrequantized();
  if (bytes == 0) return absl::OkStatus();
  if (host == nullptr || dst == nullptr) return absl::InvalidArgumentError("Upload: null pointer");
  if (recording_step()) return AbandonRecording("Upload inside a recorded step");
  // Pageable source: the runtime stages it before returning, so `host` may be reused at once.
  return CudaResult(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "Upload");
}

absl::Status CudaBackend::Download(const void* src, void* host, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (host == nullptr || src == nullptr) {
    return absl::InvalidArgumentError("Download: null pointer");
  }
  if (recording_step()) return AbandonRecording("Download inside a recorded step");
  RETURN_IF_ERROR(JoinSide());
  // Wait first so the wait is counted (a copy into pageable memory would block inside the call).
  RETURN_IF_ERROR(CudaResult(TimedWait(stream_, nullptr), "Download (kernels before it)"));
  RETURN_IF_ERROR(
      CudaResult(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "Download"));
  return CudaResult(cudaStreamSynchronize(stream_), "Download");
}

absl::Status CudaBackend::Copy(const void* src, void* dst, size_t bytes) {
  ForgetPrequantized();
  if (bytes == 0) return absl::OkStatus();
  if (src == nullptr || dst == nullptr) return absl::InvalidArgumentError("Copy: null pointer");
  return CudaResult(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "Copy");
}

absl::Status CudaBackend::Zero(void* dst, size_t bytes) {
  ForgetPrequantized();
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError("Zero: null pointer");
  return CudaResult(cudaMemsetAsync(dst, 0, bytes, stream_), "Zero");
}

absl::Status CudaBackend::PoisonFresh(void* data, size_t bytes, const char* what) {
  if (PoisonByte() < 0) return absl::OkStatus();
  // Not while a step is being captured (a memset would become part of the graph); on the stream,
  // so every later use of the memory is ordered after it.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  RETURN_IF_ERROR(CudaResult(cudaStreamIsCapturing(stream_, &capturing), what));
  if (capturing != cudaStreamCaptureStatusNone) return absl::OkStatus();
  return CudaResult(cudaMemsetAsync(data, PoisonByte(), bytes, stream_), what);
}

absl::Status CudaBackend::Synchronize() {
  if (recording_step()) return AbandonRecording("Synchronize inside a recorded step");
  RETURN_IF_ERROR(JoinSide());
  return CudaResult(TimedWait(stream_, nullptr), "Synchronize (an earlier kernel failed)");
}

absl::Status CudaBackend::EnsureSideStream() {
  if (side_stream_ != nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(
      CudaResult(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking), "side stream"));
  RETURN_IF_ERROR(
      CudaResult(cudaEventCreateWithFlags(&side_fork_, cudaEventDisableTiming), "fork event"));
  return CudaResult(cudaEventCreateWithFlags(&side_join_, cudaEventDisableTiming), "join event");
}

int64_t CudaBackend::SideBranchMaxRows() {
  static const int64_t rows = [] {
    constexpr int64_t kDefault = 16, kMax = 16;
    const char* v = std::getenv("STEPSERVE_SIDE_SHARED_MAX_ROWS");
    if (v == nullptr || v[0] == '\0') return kDefault;
    const int64_t n = std::atoll(v);
    return n >= 1 && n <= kMax ? n : kDefault;
  }();
  return rows;
}

absl::StatusOr<bool> CudaBackend::BeginSide(int64_t rows) {
  if (!side_shared_expert_ || exact_activations_ || rows < 1 || rows > SideBranchMaxRows() ||
      in_side_ || side_pending_) {
    return false;
  }
  RETURN_IF_ERROR(EnsureSideStream());
  RETURN_IF_ERROR(CudaResult(cudaEventRecord(side_fork_, stream_), "BeginSide: fork"));
  RETURN_IF_ERROR(CudaResult(cudaStreamWaitEvent(side_stream_, side_fork_, 0), "BeginSide: fork"));
  // The side starts from the main line's int8 activations (read only); its own fused outputs go
  // to separate scratch (FusedQ8Outputs), so the main line's survive for it.
  main_prequantized_ = prequantized_;
  std::swap(stream_, side_stream_);
  in_side_ = true;
  return true;
}

absl::Status CudaBackend::EndSide() {
  if (!in_side_) return absl::OkStatus();
  const absl::Status recorded = CudaResult(cudaEventRecord(side_join_, stream_), "EndSide");
  std::swap(stream_, side_stream_);
  prequantized_ = main_prequantized_;
  in_side_ = false;
  side_pending_ = true;
  return recorded;
}

absl::Status CudaBackend::JoinSide() {
  if (in_side_) RETURN_IF_ERROR(EndSide());  // an op failed inside the branch
  if (!side_pending_) return absl::OkStatus();
  side_pending_ = false;
  return CudaResult(cudaStreamWaitEvent(stream_, side_join_, 0), "JoinSide");
}

cudaError_t CudaBackend::TimedWait(cudaStream_t stream, cudaEvent_t event) {
  const auto start = std::chrono::steady_clock::now();
  const cudaError_t err =
      event != nullptr ? cudaEventSynchronize(event) : cudaStreamSynchronize(stream);
  host_blocked_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return err;
}

absl::StatusOr<WeightView> CudaBackend::PlaceWeight(const WeightView& host, std::string_view name) {
  if (host.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("PlaceWeight: %s has no data", name));
  }
  // Rows are padded to 16 bytes so the GEMV kernels can use 16-byte loads on every row.
  const int64_t row_bytes = RowBytes(host.type, host.ne[0]);  // payload of one row
  const int64_t src_pitch = host.row_bytes();
  const int64_t pitch = (row_bytes + 15) / 16 * 16;
  const int64_t rows = host.ne[1] * host.ne[2] * host.ne[3];
  const size_t bytes = static_cast<size_t>(pitch * rows);
  void* data = nullptr;
  cudaError_t err = cudaMalloc(&data, std::max<size_t>(bytes, 16));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    const BackendMemoryInfo info = memory_info();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cuda backend: weight %s needs %s but device %d has %s free (%s already in weights); "
        "%s more are needed for this tensor alone",
        name, Gib(bytes), device_, Gib(info.free_bytes), Gib(info.weight_bytes),
        Gib(bytes > info.free_bytes ? bytes - info.free_bytes : 0)));
  }
  {
    std::lock_guard<std::mutex> lock(placed_mu_);
    placed_.push_back(data);
  }
  weight_bytes_.fetch_add(bytes);
  RETURN_IF_ERROR(PoisonFresh(data, std::max<size_t>(bytes, 16), "PlaceWeight"));
  // On the backend's stream and waited for: a plain cudaMemcpy from pageable memory may return
  // before its DMA has landed (CUDA's API synchronization rules), on the legacy default stream,
  // which the non-blocking stream_ of every later kernel does not wait for; and the mapping the
  // bytes come from may go away once the model is placed.
  err = (pitch == src_pitch)
            ? cudaMemcpyAsync(data, host.data, bytes, cudaMemcpyHostToDevice, stream_)
            : cudaMemcpy2DAsync(data, pitch, host.data, src_pitch, row_bytes, rows,
                                cudaMemcpyHostToDevice, stream_);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);
  RETURN_IF_ERROR(CudaResult(err, absl::StrFormat("PlaceWeight(%s)", name).c_str()));
  WeightView placed = host;
  placed.data = data;
  placed.row_stride = pitch;
  return placed;
}

BackendMemoryInfo CudaBackend::memory_info() const {
  BackendMemoryInfo info;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    info.free_bytes = free_bytes;
    info.total_bytes = total_bytes;
  } else {
    (void)cudaGetLastError();
  }
  info.weight_bytes = weight_bytes_.load();
  info.buffer_bytes = buffer_bytes_->load();
  return info;
}

}  // namespace stepserve
