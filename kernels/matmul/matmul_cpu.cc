// Optimised CPU matmul over GGUF blocks. Memory-bound on the weights, so the design goal is to
// read every weight byte once per call: one X row goes straight through quant::DotRow; a batch
// dequantizes each weight-row chunk once (to a buffer that stays in L1) and reuses it for all rows.
#include <algorithm>

#include "engine/quant/quant.h"
#include "kernels/common/vec.h"
#include "kernels/matmul/matmul.h"

namespace stepserve::kernels {
namespace {

// Elements per dequantized chunk: a multiple of every block size (32 and 256) and small enough
// (8 KiB) to stay in L1 while the X rows stream past it.
constexpr int64_t kChunkElems = 2048;

// Output rows handed to one thread at a time: enough work to amortise scheduling.
constexpr int64_t kMinRowsPerTask = 8;

}  // namespace

void MatmulCpuRange(const MatmulArgs& a, int64_t out_begin, int64_t out_end) {
  const auto* w = static_cast<const uint8_t*>(a.w);
  if (a.rows == 1) {
    for (int64_t o = out_begin; o < out_end; ++o) {
      a.y[o] = quant::DotRow(a.type, w + o * a.w_row_bytes, a.x, a.in);
    }
    return;
  }
  const int64_t block_elems = TypeInfo(a.type).block_elems;
  const int64_t block_bytes = TypeInfo(a.type).block_bytes;
  alignas(64) float chunk[kChunkElems];
  for (int64_t o = out_begin; o < out_end; ++o) {
    const uint8_t* w_row = w + o * a.w_row_bytes;
    for (int64_t r = 0; r < a.rows; ++r) a.y[r * a.y_stride + o] = 0.0f;
    for (int64_t k0 = 0; k0 < a.in; k0 += kChunkElems) {
      const int64_t len = std::min(kChunkElems, a.in - k0);
      // `len` is a multiple of the block size because `in` and kChunkElems are.
      (void)quant::DequantizeRow(a.type, w_row + (k0 / block_elems) * block_bytes, chunk, len);
      for (int64_t r = 0; r < a.rows; ++r) {
        a.y[r * a.y_stride + o] += VecDot(chunk, a.x + r * a.x_stride + k0, len);
      }
    }
  }
}

KernelStatus MatmulCpu(const MatmulArgs& a, ThreadPool* pool) {
  if (KernelStatus s = ValidateMatmul(a); s != KernelStatus::kOk) return s;
  if (pool == nullptr) {
    MatmulCpuRange(a, 0, a.out);
  } else {
    pool->ParallelFor(a.out, kMinRowsPerTask,
                      [&](int64_t begin, int64_t end) { MatmulCpuRange(a, begin, end); });
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
