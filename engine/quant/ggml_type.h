// ggml tensor type ids and block geometry (spec: shared/spec/gguf-and-quants.md, B.1).
// The lowest layer of the engine: the GGUF reader uses it to size tensors, kernels to walk blocks.
#ifndef STEPSERVE_ENGINE_QUANT_GGML_TYPE_H_
#define STEPSERVE_ENGINE_QUANT_GGML_TYPE_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace stepserve {

// Values are the int32 ids stored in GGUF tensor-info records.
enum class GgmlType : int32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
  kQ2_0 = 42,
};

inline constexpr int32_t kGgmlTypeCount = 43;

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;  // ggml's spelling: "f32", "q4_K", "iq2_xxs", ...
  int64_t block_elems;    // elements per block (1 for plain types)
  int64_t block_bytes;    // bytes per block
};

// The geometry of a type id as read from a file; nullopt for ids outside [0, 43) and for removed
// ids (4, 5, 31..33, 36..38), which ggml gives block size 0.
std::optional<GgmlTypeInfo> LookupGgmlType(int32_t id);
// Same, for a known enum value (always present).
const GgmlTypeInfo& TypeInfo(GgmlType type);
// Parses ggml's type name, case-insensitively ("Q4_K", "q4_k", "iq4_xs", "bf16").
std::optional<GgmlType> ParseGgmlTypeName(std::string_view name);
std::string_view GgmlTypeName(GgmlType type);

// Bytes of `n_elems` elements of `type` laid out as whole blocks; -1 if n_elems is not a multiple
// of the block size or the result would overflow int64.
int64_t RowBytes(GgmlType type, int64_t n_elems);

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_QUANT_GGML_TYPE_H_
