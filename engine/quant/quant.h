// Block formats on the CPU: dequantize to float, quantize from float, random valid blocks.
// These are the reference implementations every faster kernel is checked against
// (spec: shared/spec/gguf-and-quants.md, Part B; tables: shared/ref/ggml-tables/).
#ifndef STEPSERVE_ENGINE_QUANT_QUANT_H_
#define STEPSERVE_ENGINE_QUANT_QUANT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/quant/ggml_type.h"

namespace stepserve::quant {

// Types DequantizeRow supports: F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K,
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS.
bool CanDequantize(GgmlType type);
// Types QuantizeRow supports (round to nearest): F32, F16, BF16, Q8_0, Q4_K, Q6_K.
bool CanQuantize(GgmlType type);
// Types FillRandomBlocks supports: every type CanDequantize accepts.
bool CanFillRandom(GgmlType type);

// Dequantizes `n` elements (a multiple of the block size) from blocks at `src` into `dst`.
// `src` needs no alignment. Bit-exact with ggml's reference dequantizers.
absl::Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

// Quantizes `n` floats (a multiple of the block size) into blocks at `dst`.
absl::Status QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

// Writes `n_blocks` random but valid blocks of `type` (finite scales, all index fields in range)
// whose dequantized values have a root-mean-square of roughly `target_rms`. Deterministic for a
// given seed. Used to build synthetic models of types we cannot quantize to.
absl::Status FillRandomBlocks(GgmlType type, void* dst, int64_t n_blocks, uint64_t seed,
                              float target_rms);

// Dot product of one quantized row (`n` elements, a multiple of the block size) with the float
// vector `x`: sum_e w_e * x_e, where w_e are exactly DequantizeRow's values. Works block by block
// through a small stack buffer (the CPU matmul inner loop; no heap). The summation order is not
// sequential, so the result agrees with a plain float dot to rounding, not bit for bit.
// Returns NaN if the type is not dequantizable or `n` is not a multiple of the block size:
// callers validate shapes once (CanDequantize, RowBytes) rather than per row.
float DotRow(GgmlType type, const void* blocks, const float* x, int64_t n);

}  // namespace stepserve::quant

#endif  // STEPSERVE_ENGINE_QUANT_QUANT_H_
