// Public entry points of engine/quant: the type -> kernel table and argument checks.
#include "engine/quant/quant.h"

#include <iterator>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "engine/quant/quant_internal.h"

namespace stepserve::quant {
namespace internal {
namespace {

constexpr Codec kCodecs[] = {
    {GgmlType::kF32, 1, 4, DequantF32, QuantF32},
    {GgmlType::kF16, 1, 2, DequantF16, QuantF16},
    {GgmlType::kBF16, 1, 2, DequantBF16, QuantBF16},
    {GgmlType::kQ8_0, 32, 34, DequantQ8_0, QuantQ8_0},
    {GgmlType::kQ4_0, 32, 18, DequantQ4_0, nullptr},
    {GgmlType::kIQ4_NL, 32, 18, DequantIQ4_NL, nullptr},
    {GgmlType::kQ2_K, 256, 84, DequantQ2_K, nullptr},
    {GgmlType::kQ3_K, 256, 110, DequantQ3_K, nullptr},
    {GgmlType::kQ4_K, 256, 144, DequantQ4_K, QuantQ4_K},
    {GgmlType::kQ5_K, 256, 176, DequantQ5_K, nullptr},
    {GgmlType::kQ6_K, 256, 210, DequantQ6_K, QuantQ6_K},
    {GgmlType::kQ8_K, 256, 292, DequantQ8_K, nullptr},
    {GgmlType::kIQ2_XXS, 256, 66, DequantIQ2_XXS, nullptr},
    {GgmlType::kIQ2_XS, 256, 74, DequantIQ2_XS, nullptr},
    {GgmlType::kIQ2_S, 256, 82, DequantIQ2_S, nullptr},
    {GgmlType::kIQ3_XXS, 256, 98, DequantIQ3_XXS, nullptr},
    {GgmlType::kIQ3_S, 256, 110, DequantIQ3_S, nullptr},
    {GgmlType::kIQ4_XS, 256, 136, DequantIQ4_XS, nullptr},
};

}  // namespace

const Codec* FindCodec(GgmlType type) {
  for (const Codec& codec : kCodecs) {
    if (codec.type == type) return &codec;
  }
  return nullptr;
}

}  // namespace internal

namespace {

// Common checks: a known codec and a whole number of blocks.
absl::StatusOr<const internal::Codec*> CheckRow(const char* op, GgmlType type, int64_t n,
                                                bool need_quant) {
  const internal::Codec* codec = internal::FindCodec(type);
  if (codec == nullptr || (need_quant && codec->quant == nullptr)) {
    return absl::UnimplementedError(absl::StrFormat("%s: tensor type %s (id %d) is not supported",
                                                    op, GgmlTypeName(type),
                                                    static_cast<int>(type)));
  }
  if (n < 0 || n % codec->block_elems != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d elements of type %s is not a whole number of %d-element blocks", op,
                        n, GgmlTypeName(type), codec->block_elems));
  }
  return codec;
}

}  // namespace

bool CanDequantize(GgmlType type) { return internal::FindCodec(type) != nullptr; }

bool CanQuantize(GgmlType type) {
  const internal::Codec* codec = internal::FindCodec(type);
  return codec != nullptr && codec->quant != nullptr;
}

bool CanFillRandom(GgmlType type) { return CanDequantize(type); }

absl::Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  absl::StatusOr<const internal::Codec*> codec = CheckRow("DequantizeRow", type, n, false);
  if (!codec.ok()) return codec.status();
  (*codec)->dequant(static_cast<const uint8_t*>(src), dst, n / (*codec)->block_elems);
  return absl::OkStatus();
}

absl::Status QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  absl::StatusOr<const internal::Codec*> codec = CheckRow("QuantizeRow", type, n, true);
  if (!codec.ok()) return codec.status();
  (*codec)->quant(src, static_cast<uint8_t*>(dst), n / (*codec)->block_elems);
  return absl::OkStatus();
}

}  // namespace stepserve::quant
