// Reproduces every Y value of every file in shared/ref/ggml-tables/vectors bit for bit (spec B.9).
// Types we deliberately do not support are reported as skipped by name; any other file whose type
// we cannot dequantize fails.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"

namespace stepserve::quant {
namespace {

const std::set<std::string> kUnsupported = {"q4_1",  "q5_0",  "q5_1", "iq1_s",
                                            "iq1_m", "mxfp4", "nvfp4"};

struct Vectors {
  std::vector<uint8_t> blocks;                  // B lines concatenated
  std::vector<std::pair<int64_t, uint32_t>> y;  // (element, float bits)
};

std::vector<uint8_t> ParseHex(const std::string& hex, const std::string& where) {
  std::vector<uint8_t> out;
  if (hex.size() % 2 != 0) ADD_FAILURE() << where << ": odd hex length";
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoul(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

Vectors ReadVectors(const std::filesystem::path& path, int64_t block_bytes) {
  Vectors v;
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::string line;
  int line_no = 0;
  int64_t next_block = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = path.filename().string() + ":" + std::to_string(line_no);
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string tag;
    fields >> tag;
    if (tag == "B") {
      int64_t index;
      std::string hex;
      fields >> index >> hex;
      EXPECT_EQ(index, next_block) << where;
      ++next_block;
      std::vector<uint8_t> bytes = ParseHex(hex, where);
      EXPECT_EQ(static_cast<int64_t>(bytes.size()), block_bytes) << where;
      v.blocks.insert(v.blocks.end(), bytes.begin(), bytes.end());
    } else if (tag == "Y") {
      int64_t elem;
      std::string bits;
      fields >> elem >> bits;
      v.y.emplace_back(elem, static_cast<uint32_t>(std::stoul(bits, nullptr, 16)));
    } else {
      ADD_FAILURE() << where << ": unknown line tag '" << tag << "'";
    }
  }
  return v;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

TEST(QuantVectorsTest, EveryVectorFileBitExact) {
  const std::filesystem::path dir =
      std::filesystem::path(STEPSERVE_SHARED_DIR) / "ref" / "ggml-tables" / "vectors";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".txt") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::set<GgmlType> checked;
  for (const auto& path : files) {
    const std::string stem = path.stem().string();
    SCOPED_TRACE(stem);
    const std::optional<GgmlType> type = ParseGgmlTypeName(stem);
    ASSERT_TRUE(type.has_value()) << "vector file for unknown type " << path;
    if (!CanDequantize(*type)) {
      EXPECT_TRUE(kUnsupported.count(stem)) << "no dequantizer for " << stem;
      std::cout << "[  SKIPPED ] vectors/" << stem << ".txt: type " << stem
                << " is not supported\n";
      continue;
    }
    const GgmlTypeInfo& info = TypeInfo(*type);
    const Vectors v = ReadVectors(path, info.block_bytes);
    ASSERT_FALSE(v.blocks.empty());
    const int64_t n = static_cast<int64_t>(v.blocks.size()) / info.block_bytes * info.block_elems;
    ASSERT_EQ(static_cast<int64_t>(v.y.size()), n) << "every element must have a Y line";

    // Run once aligned and once from an odd address (loads must be unaligned-safe).
    for (size_t shift : {size_t{0}, size_t{1}}) {
      std::vector<uint8_t> src(v.blocks.size() + shift);
      std::memcpy(src.data() + shift, v.blocks.data(), v.blocks.size());
      std::vector<float> out(n);
      const uint32_t poison = 0x7fc0dead;
      for (float& f : out) std::memcpy(&f, &poison, sizeof f);
      ASSERT_TRUE(DequantizeRow(*type, src.data() + shift, out.data(), n).ok());
      int mismatches = 0;
      for (const auto& [elem, bits] : v.y) {
        ASSERT_GE(elem, 0);
        ASSERT_LT(elem, n);
        if (Bits(out[elem]) != bits && ++mismatches <= 5) {
          ADD_FAILURE() << stem << " element " << elem << " (shift " << shift << "): got 0x"
                        << std::hex << Bits(out[elem]) << " want 0x" << bits << std::dec;
        }
      }
      EXPECT_EQ(mismatches, 0) << stem;
    }
    std::cout << "[  CHECKED ] vectors/" << stem << ".txt: " << v.y.size() << " values bit-exact\n";
    checked.insert(*type);
  }
  // The directory must actually have covered every block type we claim to support.
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ2_K, GgmlType::kQ3_K,
                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_K,
                     GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS,
                     GgmlType::kIQ3_S, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS}) {
    EXPECT_TRUE(checked.count(t)) << "no vector file checked for " << GgmlTypeName(t);
  }
}

TEST(QuantVectorsTest, RejectsUnsupportedTypeAndPartialBlocks) {
  std::vector<uint8_t> src(1024, 0);
  std::vector<float> out(512);
  const absl::Status unsupported = DequantizeRow(GgmlType::kIQ1_S, src.data(), out.data(), 256);
  EXPECT_EQ(unsupported.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(unsupported.message().find("iq1_s"), std::string::npos) << unsupported.message();
  const absl::Status partial = DequantizeRow(GgmlType::kQ4_K, src.data(), out.data(), 300);
  EXPECT_EQ(partial.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(partial.message().find("300"), std::string::npos) << partial.message();
  EXPECT_FALSE(DequantizeRow(GgmlType::kQ8_0, src.data(), out.data(), -32).ok());
  EXPECT_FALSE(QuantizeRow(GgmlType::kIQ2_XXS, out.data(), src.data(), 256).ok());
}

}  // namespace
}  // namespace stepserve::quant
