#include "engine/quant/ggml_type.h"

#include <array>
#include <limits>


namespace stepserve {
namespace {

constexpr GgmlTypeInfo kTypes[] = {
    {GgmlType::kF32, "f32", 1, 4},          {GgmlType::kF16, "f16", 1, 2},
    {GgmlType::kQ4_0, "q4_0", 32, 18},      {GgmlType::kQ4_1, "q4_1", 32, 20},
    {GgmlType::kQ5_0, "q5_0", 32, 22},      {GgmlType::kQ5_1, "q5_1", 32, 24},
    {GgmlType::kQ8_0, "q8_0", 32, 34},      {GgmlType::kQ8_1, "q8_1", 32, 36},
    {GgmlType::kQ2_K, "q2_K", 256, 84},     {GgmlType::kQ3_K, "q3_K", 256, 110},
    {GgmlType::kQ4_K, "q4_K", 256, 144},    {GgmlType::kQ5_K, "q5_K", 256, 176},
    {GgmlType::kQ6_K, "q6_K", 256, 210},    {GgmlType::kQ8_K, "q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "iq2_xxs", 256, 66}, {GgmlType::kIQ2_XS, "iq2_xs", 256, 74},
    {GgmlType::kIQ3_XXS, "iq3_xxs", 256, 98}, {GgmlType::kIQ1_S, "iq1_s", 256, 50},
    {GgmlType::kIQ4_NL, "iq4_nl", 32, 18},  {GgmlType::kIQ3_S, "iq3_s", 256, 110},
    {GgmlType::kIQ2_S, "iq2_s", 256, 82},   {GgmlType::kIQ4_XS, "iq4_xs", 256, 136},
    {GgmlType::kI8, "i8", 1, 1},            {GgmlType::kI16, "i16", 1, 2},
    {GgmlType::kI32, "i32", 1, 4},          {GgmlType::kI64, "i64", 1, 8},
    {GgmlType::kF64, "f64", 1, 8},          {GgmlType::kIQ1_M, "iq1_m", 256, 56},
    {GgmlType::kBF16, "bf16", 1, 2},        {GgmlType::kTQ1_0, "tq1_0", 256, 54},
    {GgmlType::kTQ2_0, "tq2_0", 256, 66},   {GgmlType::kMXFP4, "mxfp4", 32, 17},
    {GgmlType::kNVFP4, "nvfp4", 64, 36},    {GgmlType::kQ1_0, "q1_0", 128, 18},
    {GgmlType::kQ2_0, "q2_0", 64, 18},
};

// Index by id; -1 marks removed or unknown ids.
constexpr std::array<int, kGgmlTypeCount> BuildIndex() {
  std::array<int, kGgmlTypeCount> index{};
  for (int& slot : index) slot = -1;
  for (int i = 0; i < static_cast<int>(std::size(kTypes)); ++i) {
    index[static_cast<int32_t>(kTypes[i].type)] = i;
  }
  return index;
}
constexpr std::array<int, kGgmlTypeCount> kIndex = BuildIndex();

}  // namespace

std::optional<GgmlTypeInfo> LookupGgmlType(int32_t id) {
  if (id < 0 || id >= kGgmlTypeCount || kIndex[id] < 0) return std::nullopt;
  return kTypes[kIndex[id]];
}

const GgmlTypeInfo& TypeInfo(GgmlType type) {
  return kTypes[kIndex[static_cast<int32_t>(type)]];
}

std::optional<GgmlType> ParseGgmlTypeName(std::string_view name) {
  auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
  for (const GgmlTypeInfo& info : kTypes) {
    if (info.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) same = lower(info.name[i]) == lower(name[i]);
    if (same) return info.type;
  }
  return std::nullopt;
}

std::string_view GgmlTypeName(GgmlType type) { return TypeInfo(type).name; }

int64_t RowBytes(GgmlType type, int64_t n_elems) {
  const GgmlTypeInfo& info = TypeInfo(type);
  if (n_elems < 0 || n_elems % info.block_elems != 0) return -1;
  int64_t blocks = n_elems / info.block_elems;
  if (blocks > std::numeric_limits<int64_t>::max() / info.block_bytes) return -1;
  return blocks * info.block_bytes;
}

}  // namespace stepserve
