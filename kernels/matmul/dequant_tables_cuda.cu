// DeviceDequantTables (dequant_cuda.h): one device copy of the i-quant lookup tables per device,
// built from the host tables on first use and kept until the process exits. Kernels receive the
// pointers by value, so no __device__ symbol has to be shared between translation units (the
// CUDA libraries are built without relocatable device code).
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "engine/quant/quant_tables.h"
#include "kernels/matmul/dequant_cuda.h"

namespace stepserve::kernels {
namespace {

// Appends `count` elements of `table` to `blob` (8-byte aligned) and returns their offset.
template <typename T>
size_t Append(std::vector<uint8_t>& blob, const T* table, size_t count) {
  const size_t offset = (blob.size() + 7) / 8 * 8;
  blob.resize(offset + count * sizeof(T));
  std::memcpy(blob.data() + offset, table, count * sizeof(T));
  return offset;
}

}  // namespace

KernelStatus DeviceDequantTables(DequantTables* tables) {
  static std::mutex mu;
  static std::map<int, DequantTables>* by_device = new std::map<int, DequantTables>();
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return KernelStatus::kInvalidArgument;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = by_device->find(device); it != by_device->end()) {
    *tables = it->second;
    return KernelStatus::kOk;
  }
  std::vector<uint8_t> blob;
  const size_t iq2xxs = Append(blob, quant::kIq2xxsGrid, 256);
  const size_t iq2xs = Append(blob, quant::kIq2xsGrid, 512);
  const size_t iq2s = Append(blob, quant::kIq2sGrid, 1024);
  const size_t iq3xxs = Append(blob, quant::kIq3xxsGrid, 256);
  const size_t iq3s = Append(blob, quant::kIq3sGrid, 512);
  const size_t ksigns = Append(blob, quant::kKsignsIq2xs, 128);
  const size_t iq4nl = Append(blob, quant::kKvaluesIq4nl, 16);
  void* device_blob = nullptr;
  cudaError_t err = cudaMalloc(&device_blob, blob.size());
  if (err == cudaSuccess) {
    err = cudaMemcpy(device_blob, blob.data(), blob.size(), cudaMemcpyHostToDevice);
  }
  // A pageable copy may still be in flight when cudaMemcpy returns; kernels on other (non-blocking)
  // streams must not start before it lands. Once per device, so a full sync is affordable.
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (device_blob != nullptr) cudaFree(device_blob);
    return KernelStatus::kInvalidArgument;
  }
  const auto* base = static_cast<const uint8_t*>(device_blob);
  DequantTables t;
  t.iq2xxs_grid = reinterpret_cast<const uint64_t*>(base + iq2xxs);
  t.iq2xs_grid = reinterpret_cast<const uint64_t*>(base + iq2xs);
  t.iq2s_grid = reinterpret_cast<const uint64_t*>(base + iq2s);
  t.iq3xxs_grid = reinterpret_cast<const uint32_t*>(base + iq3xxs);
  t.iq3s_grid = reinterpret_cast<const uint32_t*>(base + iq3s);
  t.ksigns = base + ksigns;
  t.iq4nl_values = reinterpret_cast<const int8_t*>(base + iq4nl);
  (*by_device)[device] = t;
  *tables = t;
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
