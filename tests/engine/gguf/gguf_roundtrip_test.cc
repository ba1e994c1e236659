// Writer <-> reader round trips: every metadata type (nested and empty arrays too), v2 and v3,
// alignments, tensor bytes, byte-stable re-writes, split sets and their failure modes.
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/gguf/gguf_test_util.h"

namespace stepserve::gguf {
namespace {

using ::stepserve::gguf::testing::ByteBuilder;
using ::stepserve::gguf::testing::RandomBytes;
using ::stepserve::gguf::testing::ReadFileBytes;
using ::stepserve::gguf::testing::TempDir;
using ::stepserve::gguf::testing::WriteFileBytes;
using ::testing::HasSubstr;

template <typename T>
Value V(T v) {
  return Value(Value::Storage(std::in_place_type<T>, v));
}

Metadata EveryTypeMetadata() {
  Metadata md;
  md.Set("general.architecture", "step35");
  md.Set("t.u8", V<uint8_t>(250));
  md.Set("t.i8", V<int8_t>(-100));
  md.Set("t.u16", V<uint16_t>(65000));
  md.Set("t.i16", V<int16_t>(-32000));
  md.Set("t.u32", V<uint32_t>(4000000000u));
  md.Set("t.i32", V<int32_t>(-2000000000));
  md.Set("t.f32", V<float>(-0.125f));
  md.Set("t.bool", V<bool>(true));
  md.Set("t.str", "h\xc3\xa9llo\nworld");
  md.Set("t.empty_str", "");
  md.Set("t.u64", V<uint64_t>(0xFEDCBA9876543210ull));
  md.Set("t.i64", V<int64_t>(-0x123456789ABCll));
  md.Set("t.f64", V<double>(3.141592653589793));
  md.Set("t.arr_i32", Value::Int32Array({1, -2, 3}));
  md.Set("t.arr_f32", Value::Float32Array({0.5f, 1e-30f}));
  md.Set("t.arr_bool", Value::BoolArray({true, false, true}));
  md.Set("t.arr_str", Value::StringArray({"a", "", "b c"}));
  md.Set("t.arr_empty", Value::MakeArray(ValueType::kUint64, {}));
  md.Set("t.arr_u8", Value::MakeArray(ValueType::kUint8, {V<uint8_t>(0), V<uint8_t>(255)}));
  md.Set("t.arr_i64", Value::MakeArray(ValueType::kInt64, {V<int64_t>(-1)}));
  md.Set("t.arr_f64", Value::MakeArray(ValueType::kFloat64, {V<double>(-2.5)}));
  md.Set("t.arr_u16", Value::MakeArray(ValueType::kUint16, {V<uint16_t>(7)}));
  md.Set("t.arr_i16", Value::MakeArray(ValueType::kInt16, {V<int16_t>(-7)}));
  md.Set("t.arr_u32", Value::MakeArray(ValueType::kUint32, {V<uint32_t>(9)}));
  md.Set("t.arr_i8", Value::MakeArray(ValueType::kInt8, {V<int8_t>(-9)}));
  md.Set("t.nested",
         Value::MakeArray(ValueType::kArray, {Value::Int32Array({1, 2}), Value::Int32Array({}),
                                              Value::Int32Array({3})}));
  md.Set("t.nested_str", Value::MakeArray(ValueType::kArray, {Value::StringArray({"x"}),
                                                              Value::StringArray({"y", "z"})}));
  md.Set("t.nested_empty", Value::MakeArray(ValueType::kArray, {}));
  return md;
}

struct TensorSpec {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
  std::string bytes;
};

std::vector<TensorSpec> RandomTensors(std::mt19937_64& rng) {
  std::vector<TensorSpec> specs = {
      {"token_embd.weight", GgmlType::kQ8_0, {96, 7}, ""},
      {"blk.0.attn_norm.weight", GgmlType::kF32, {13}, ""},
      {"blk.0.ffn_gate_exps.weight", GgmlType::kQ4_K, {256, 3, 5}, ""},
      {"blk.0.odd.weight", GgmlType::kMXFP4, {32, 3}, ""},
      {"blk.0.bf16", GgmlType::kBF16, {5, 3, 1, 2}, ""},
      {"blk.0.empty", GgmlType::kF16, {0, 4}, ""},
      {"output.weight", GgmlType::kQ6_K, {512, 3}, ""},
  };
  for (TensorSpec& s : specs) {
    int64_t bytes = RowBytes(s.type, s.ne[0]);
    for (size_t d = 1; d < s.ne.size(); ++d) bytes *= s.ne[d];
    s.bytes = RandomBytes(rng, static_cast<size_t>(bytes));
  }
  return specs;
}

void AddAll(GgufWriter& writer, const std::vector<TensorSpec>& specs) {
  for (const TensorSpec& s : specs) {
    ASSERT_TRUE(writer.AddTensor(s.name, s.type, s.ne, s.bytes).ok()) << s.name;
  }
}

// `mapped`: the file came from Open (page-aligned mmap), so data pointers are aligned.
void ExpectTensorsMatch(const GgufFile& file, const std::vector<TensorSpec>& specs,
                        bool mapped = true) {
  ASSERT_EQ(file.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorInfo& t = file.tensors()[i];
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.type, specs[i].type);
    EXPECT_EQ(t.n_dims, specs[i].ne.size());
    for (size_t d = 0; d < 4; ++d) {
      EXPECT_EQ(t.ne[d], d < specs[i].ne.size() ? specs[i].ne[d] : 1) << t.name;
    }
    ASSERT_EQ(t.nbytes, specs[i].bytes.size()) << t.name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(t.data), t.nbytes), specs[i].bytes)
        << t.name;
    uint32_t alignment = file.shards()[t.shard].alignment;
    if (mapped) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % alignment, 0u) << t.name;
    }
    EXPECT_EQ(file.FindTensor(t.name), &t);
  }
}

// Copies a parsed file into a new writer (metadata and tensor bytes).
std::vector<std::string> Rewrite(const GgufFile& file, const std::string& path, WriteOptions o) {
  GgufWriter writer(o);
  writer.metadata() = file.metadata();
  for (const TensorInfo& t : file.tensors()) {
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    std::string bytes(reinterpret_cast<const char*>(t.data), t.nbytes);
    EXPECT_TRUE(writer.AddTensor(t.name, t.type, ne, bytes).ok());
  }
  auto paths = writer.Write(path);
  EXPECT_TRUE(paths.ok()) << paths.status();
  return paths.ok() ? *paths : std::vector<std::string>{};
}

class RoundTripTest : public ::testing::TestWithParam<std::pair<uint32_t, uint32_t>> {};

TEST_P(RoundTripTest, MetadataTensorsAndBytesSurvive) {
  auto [version, alignment] = GetParam();
  TempDir dir;
  std::mt19937_64 rng(version * 1000 + alignment);
  std::vector<TensorSpec> specs = RandomTensors(rng);
  WriteOptions options;
  options.version = version;
  options.alignment = alignment;
  GgufWriter writer(options);
  writer.metadata() = EveryTypeMetadata();
  AddAll(writer, specs);
  std::vector<std::tuple<size_t, size_t, uint64_t>> progress;
  auto paths = writer.Write(dir.File("m.gguf"), [&](size_t done, size_t total, uint64_t bytes) {
    progress.emplace_back(done, total, bytes);
  });
  ASSERT_TRUE(paths.ok()) << paths.status();
  ASSERT_EQ(*paths, std::vector<std::string>{dir.File("m.gguf")});
  ASSERT_EQ(progress.size(), specs.size());
  EXPECT_EQ(std::get<0>(progress.back()), specs.size());
  EXPECT_EQ(std::get<1>(progress.back()), specs.size());

  OpenOptions strict;
  strict.strict_layout = true;
  auto file = GgufFile::Open(dir.File("m.gguf"), strict);
  ASSERT_TRUE(file.ok()) << file.status();
  Metadata expected = EveryTypeMetadata();
  if (alignment != 32) expected.Set("general.alignment", V<uint32_t>(alignment));
  EXPECT_TRUE((*file)->metadata() == expected);
  EXPECT_EQ((*file)->architecture(), "step35");
  ASSERT_EQ((*file)->shards().size(), 1u);
  const ShardInfo& shard = (*file)->shards()[0];
  EXPECT_EQ(shard.version, version);
  EXPECT_EQ(shard.alignment, alignment);
  EXPECT_EQ(shard.data_offset % alignment, 0u);
  EXPECT_EQ(shard.n_tensors, static_cast<int64_t>(specs.size()));
  EXPECT_EQ(shard.file_size, std::filesystem::file_size(dir.File("m.gguf")));
  ExpectTensorsMatch(**file, specs);
  uint64_t total = 0;
  for (const TensorSpec& s : specs) total += s.bytes.size();
  EXPECT_EQ((*file)->total_tensor_bytes(), total);
  EXPECT_EQ(std::get<2>(progress.back()), total);
  for (const TensorInfo& t : (*file)->tensors()) EXPECT_EQ(t.file_offset % alignment, 0u);

  // Rewriting what was read gives the same bytes; the buffer parser agrees with the mmap one.
  Rewrite(**file, dir.File("again.gguf"), options);
  std::string original = ReadFileBytes(dir.File("m.gguf"));
  EXPECT_EQ(ReadFileBytes(dir.File("again.gguf")), original);
  auto from_buffer = GgufFile::FromBuffer(original, "mem");
  ASSERT_TRUE(from_buffer.ok()) << from_buffer.status();
  EXPECT_TRUE((*from_buffer)->metadata() == (*file)->metadata());
  ExpectTensorsMatch(**from_buffer, specs, /*mapped=*/false);
}

INSTANTIATE_TEST_SUITE_P(VersionsAndAlignments, RoundTripTest,
                         ::testing::Values(std::pair{3u, 32u}, std::pair{2u, 32u},
                                           std::pair{3u, 64u}, std::pair{3u, 8u}));

TEST(WriterTest, EmptyFileAndMetadataOnly) {
  TempDir dir;
  GgufWriter writer;
  auto paths = writer.Write(dir.File("empty.gguf"));
  ASSERT_TRUE(paths.ok()) << paths.status();
  auto file = GgufFile::Open(dir.File("empty.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().size(), 0u);
  EXPECT_TRUE((*file)->tensors().empty());
  EXPECT_EQ((*file)->architecture(), "");
}

TEST(WriterTest, RejectsBadTensorsAndLeavesNothingOnFailedFill) {
  GgufWriter writer;
  EXPECT_FALSE(writer.AddTensor(std::string(64, 'n'), GgmlType::kF32, {1}, std::string(4, 0)).ok());
  EXPECT_FALSE(writer.AddTensor("q", GgmlType::kQ4_K, {255}, std::string()).ok());
  EXPECT_FALSE(writer.AddTensor("neg", GgmlType::kF32, {-1}, std::string()).ok());
  EXPECT_FALSE(writer.AddTensor("dims", GgmlType::kF32, {1, 1, 1, 1, 1}, std::string(4, 0)).ok());
  EXPECT_FALSE(writer.AddTensor("none", GgmlType::kF32, {}, std::string()).ok());
  EXPECT_FALSE(writer.AddTensor("size", GgmlType::kF32, {2}, std::string(4, 0)).ok());
  ASSERT_TRUE(writer.AddTensor("ok", GgmlType::kF32, {1}, std::string(4, 0)).ok());
  EXPECT_EQ(writer.AddTensor("ok", GgmlType::kF32, {1}, std::string(4, 0)).code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(writer
                  .AddTensor("fails", GgmlType::kF32, {8},
                             [](uint8_t*, uint64_t) { return absl::DataLossError("disk gone"); })
                  .ok());
  TempDir dir;
  auto paths = writer.Write(dir.File("bad.gguf"));
  ASSERT_FALSE(paths.ok());
  EXPECT_THAT(std::string(paths.status().message()), HasSubstr("'fails'"));
  EXPECT_THAT(std::string(paths.status().message()), HasSubstr("disk gone"));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));

  GgufWriter mixed;
  mixed.metadata().Set("bad", Value::MakeArray(ValueType::kInt32, {V<float>(1.0f)}));
  EXPECT_FALSE(mixed.Write(dir.File("mixed.gguf")).ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(WriterTest, TensorDataHolesForBigTensorsOnly) {
  TempDir dir;
  WriteOptions options;
  options.tensor_data_holes = true;
  GgufWriter writer(options);
  writer.metadata().Set("general.architecture", Value("step35"));
  bool filled = false;
  ASSERT_TRUE(writer
                  .AddTensor("big", GgmlType::kQ8_0, {1024, 1024},  // 1.06 MiB
                             [&filled](uint8_t*, uint64_t) {
                               filled = true;
                               return absl::OkStatus();
                             })
                  .ok());
  ASSERT_TRUE(writer.AddTensor("last", GgmlType::kF32, {3}, std::string(12, 'x')).ok());
  ASSERT_TRUE(writer.Write(dir.File("holes.gguf")).ok());
  EXPECT_FALSE(filled);  // the big tensor's bytes are never produced
  auto file = GgufFile::Open(dir.File("holes.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->tensors().size(), 2u);
  const auto& big = (*file)->tensors()[0];
  for (uint64_t i = 0; i < big.nbytes; i += 4099) EXPECT_EQ(big.data[i], 0) << i;  // a hole
  const auto& last = (*file)->tensors()[1];
  EXPECT_EQ(last.name, "last");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(last.data), 12), std::string(12, 'x'));
}

TEST(ReaderTest, OpenErrorsNameThePath) {
  TempDir dir;
  auto missing = GgufFile::Open(dir.File("nope.gguf"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope.gguf"));
  WriteFileBytes(dir.File("zero.gguf"), "");
  auto zero = GgufFile::Open(dir.File("zero.gguf"));
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("zero.gguf"));
  auto directory = GgufFile::Open(dir.path());
  EXPECT_FALSE(directory.ok());
}

// ---- split sets ----

struct SplitSet {
  TempDir dir;
  std::vector<TensorSpec> specs;
  std::vector<std::string> paths;
};

void MakeSplit(SplitSet& set, const std::string& name, uint64_t max_bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  set.specs = RandomTensors(rng);
  WriteOptions options;
  options.split_max_bytes = max_bytes;
  GgufWriter writer(options);
  writer.metadata() = EveryTypeMetadata();
  AddAll(writer, set.specs);
  auto paths = writer.Write(set.dir.File(name + ".gguf"));
  ASSERT_TRUE(paths.ok()) << paths.status();
  set.paths = *paths;
}

TEST(SplitTest, WritesGgufSplitSchemeAndReadsBackMerged) {
  SplitSet set;
  MakeSplit(set, "model", 1200, 7);
  ASSERT_GT(set.paths.size(), 2u);
  int n = static_cast<int>(set.paths.size());
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(set.paths[i], SplitShardPath(set.dir.File("model"), i, n));
  }
  EXPECT_EQ(SplitShardPath("a/b", 0, 9), "a/b-00001-of-00009.gguf");
  for (int opened_from = 0; opened_from < n; ++opened_from) {
    auto file = GgufFile::Open(set.paths[opened_from]);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ((*file)->shards().size(), set.paths.size());
    ExpectTensorsMatch(**file, set.specs);
    const Metadata& md = (*file)->metadata();
    EXPECT_EQ(*md.GetString("general.architecture"), "step35");
    EXPECT_EQ(md.Find("split.no")->type(), ValueType::kUint16);
    EXPECT_EQ(*md.GetInt("split.no"), 0);
    EXPECT_EQ(md.Find("split.count")->type(), ValueType::kUint16);
    EXPECT_EQ(*md.GetInt("split.count"), n);
    EXPECT_EQ(md.Find("split.tensors.count")->type(), ValueType::kInt32);
    EXPECT_EQ(*md.GetInt("split.tensors.count"), static_cast<int64_t>(set.specs.size()));
    int last_shard = 0;
    for (const TensorInfo& t : (*file)->tensors()) {
      EXPECT_GE(t.shard, last_shard);  // consecutive runs, original order
      last_shard = t.shard;
      EXPECT_EQ(t.file_offset, (*file)->shards()[t.shard].data_offset + t.offset);
    }
    EXPECT_EQ(last_shard, n - 1);
  }
  // Shards after the first carry only the split keys.
  OpenOptions single;
  single.load_split = false;
  auto second = GgufFile::Open(set.paths[1], single);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->metadata().size(), 3u);
  EXPECT_EQ(*(*second)->metadata().GetInt("split.no"), 1);
  // Each shard respects the size limit unless it holds a single tensor.
  for (const std::string& p : set.paths) {
    auto shard = GgufFile::Open(p, single);
    ASSERT_TRUE(shard.ok());
    uint64_t padded = 0;
    for (const TensorInfo& t : (*shard)->tensors()) padded += (t.nbytes + 31) / 32 * 32;
    if ((*shard)->tensors().size() > 1) {
      EXPECT_LE(padded, 1200u);
    }
  }
  // Writing the merged file again as a split gives identical shards.
  auto file = GgufFile::Open(set.paths[0]);
  ASSERT_TRUE(file.ok());
  SplitSet again;
  WriteOptions options;
  options.split_max_bytes = 1200;
  auto paths = Rewrite(**file, again.dir.File("model.gguf"), options);
  ASSERT_EQ(paths.size(), set.paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    EXPECT_EQ(ReadFileBytes(paths[i]), ReadFileBytes(set.paths[i])) << i;
  }
  // And as one file: the split keys are dropped.
  auto merged = Rewrite(**file, again.dir.File("merged.gguf"), WriteOptions{});
  auto one = GgufFile::Open(merged.at(0));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_FALSE((*one)->metadata().Contains("split.count"));
  ExpectTensorsMatch(**one, set.specs);
}

TEST(SplitTest, MissingShardIsReported) {
  SplitSet set;
  MakeSplit(set, "model", 1200, 8);
  std::filesystem::remove(set.paths[1]);
  auto file = GgufFile::Open(set.paths[0]);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("missing shard 2"));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(set.paths[1]));
}

TEST(SplitTest, ShardFromAnotherSetIsRejected) {
  SplitSet a, b;
  MakeSplit(a, "model", 1200, 9);
  MakeSplit(b, "model", 600, 9);  // same names, different shard count
  ASSERT_NE(a.paths.size(), b.paths.size());
  // b's second shard has a different split.count: it cannot stand in for a's second shard.
  std::filesystem::copy_file(b.paths[1], a.paths[1],
                             std::filesystem::copy_options::overwrite_existing);
  auto file = GgufFile::Open(a.paths[0]);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("not part of the set"));
}

TEST(SplitTest, DuplicateTensorAcrossShardsAndWrongTotalAreRejected) {
  // Hand-made two-shard set whose shards both hold tensor "w".
  TempDir dir;
  auto shard = [&](uint16_t no, uint16_t count, int32_t total, const std::string& tensor) {
    ByteBuilder b;
    b.Header(3, 1, 3);
    b.Str("split.no").Put<int32_t>(2).Put<uint16_t>(no);
    b.Str("split.count").Put<int32_t>(2).Put<uint16_t>(count);
    b.Str("split.tensors.count").Put<int32_t>(5).Put<int32_t>(total);
    b.Str(tensor).Put<uint32_t>(1).Put<int64_t>(1).Put<int32_t>(0).Put<uint64_t>(0);
    b.PadTo(32).Put<float>(1.0f).PadTo(32);
    return b.bytes();
  };
  std::string p0 = SplitShardPath(dir.File("d"), 0, 2), p1 = SplitShardPath(dir.File("d"), 1, 2);
  WriteFileBytes(p0, shard(0, 2, 2, "w"));
  WriteFileBytes(p1, shard(1, 2, 2, "v"));
  auto good = GgufFile::Open(p1);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)->tensors().size(), 2u);
  EXPECT_EQ((*good)->tensors()[1].shard, 1);

  WriteFileBytes(p1, shard(1, 2, 2, "w"));
  auto dup = GgufFile::Open(p0);
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("tensor 'w'"));

  WriteFileBytes(p0, shard(0, 2, 3, "w"));
  WriteFileBytes(p1, shard(1, 2, 3, "v"));
  auto total = GgufFile::Open(p0);
  ASSERT_FALSE(total.ok());
  EXPECT_THAT(std::string(total.status().message()), HasSubstr("split.tensors.count"));

  WriteFileBytes(p1, shard(1, 2, 2, "v"));  // disagrees with shard 0's total of 3
  auto mismatch = GgufFile::Open(p0);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_THAT(std::string(mismatch.status().message()), HasSubstr("not part of the set"));

  WriteFileBytes(p1, shard(0, 2, 3, "v"));  // wrong split.no
  EXPECT_FALSE(GgufFile::Open(p0).ok());

  // The name must follow the scheme to find siblings.
  WriteFileBytes(dir.File("renamed.gguf"), shard(0, 2, 2, "w"));
  auto renamed = GgufFile::Open(dir.File("renamed.gguf"));
  ASSERT_FALSE(renamed.ok());
  EXPECT_THAT(std::string(renamed.status().message()), HasSubstr("-00001-of-00002.gguf"));

  // split.no out of range.
  WriteFileBytes(p0, shard(2, 2, 2, "w"));
  EXPECT_FALSE(GgufFile::Open(p0).ok());
  EXPECT_FALSE(GgufFile::FromBuffer(shard(2, 2, 2, "w"), "mem").ok());
}

}  // namespace
}  // namespace stepserve::gguf
