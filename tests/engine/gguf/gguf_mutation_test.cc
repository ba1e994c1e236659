// Hostile input: hand-made invalid files, each rejected with a precise error, and thousands of
// mutated files (truncations at every length, bit flips, huge counts and lengths patched in),
// each rejected or accepted consistently, never crashing. Runs under ASan+UBSan in CI.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
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
using ::testing::HasSubstr;

template <typename T>
Value V(T v) {
  return Value(Value::Storage(std::in_place_type<T>, v));
}

// A small valid file using every value type, nested arrays and a few tensor types.
std::string SeedFile() {
  std::mt19937_64 rng(42);
  GgufWriter writer;
  Metadata& md = writer.metadata();
  md.Set("general.architecture", "step35");
  md.Set("a.u8", V<uint8_t>(1));
  md.Set("a.i8", V<int8_t>(-1));
  md.Set("a.u16", V<uint16_t>(2));
  md.Set("a.i16", V<int16_t>(-2));
  md.Set("a.u32", V<uint32_t>(3));
  md.Set("a.i32", V<int32_t>(-3));
  md.Set("a.f32", V<float>(0.5f));
  md.Set("a.bool", V<bool>(true));
  md.Set("a.u64", V<uint64_t>(4));
  md.Set("a.i64", V<int64_t>(-4));
  md.Set("a.f64", V<double>(0.25));
  md.Set("a.tokens", Value::StringArray({"<s>", "hello", "", "world"}));
  md.Set("a.heads", Value::Int32Array({64, 96, 64}));
  md.Set("a.swa", Value::BoolArray({false, true, true}));
  md.Set("a.nested", Value::MakeArray(ValueType::kArray,
                                      {Value::Int32Array({1}), Value::StringArray({"x", "yz"})}));
  EXPECT_TRUE(writer.AddTensor("a", GgmlType::kF32, {3, 2}, RandomBytes(rng, 24)).ok());
  EXPECT_TRUE(writer.AddTensor("b", GgmlType::kQ8_0, {32, 2}, RandomBytes(rng, 68)).ok());
  EXPECT_TRUE(writer.AddTensor("c", GgmlType::kQ4_K, {256}, RandomBytes(rng, 144)).ok());
  TempDir dir;
  auto paths = writer.Write(dir.File("seed.gguf"));
  EXPECT_TRUE(paths.ok()) << paths.status();
  return ReadFileBytes(dir.File("seed.gguf"));
}

// Parses `bytes`; on success checks that everything the result exposes lies inside the buffer,
// walks all metadata, and that a second parse gives the same result.
bool ParseAndWalk(const std::string& bytes) {
  auto file = GgufFile::FromBuffer(bytes, "mutant");
  if (!file.ok()) {
    EXPECT_THAT(std::string(file.status().message()), HasSubstr("mutant"));
    return false;
  }
  const uint8_t* base = reinterpret_cast<const uint8_t*>(bytes.data());
  for (const TensorInfo& t : (*file)->tensors()) {
    EXPECT_GE(t.data, base);
    EXPECT_LE(t.file_offset, bytes.size());
    EXPECT_LE(t.nbytes, bytes.size() - t.file_offset);
    EXPECT_EQ(t.data, base + t.file_offset);
    EXPECT_GE(t.n_elements(), 0);
  }
  size_t chars = 0;
  for (const auto& [key, value] : (*file)->metadata().entries()) {
    chars += value.ToString().size() + key.size();
  }
  EXPECT_GT(chars + 1, 0u);
  auto again = GgufFile::FromBuffer(bytes, "mutant");
  EXPECT_TRUE(again.ok());
  if (again.ok()) {
    // Compared as text: patched floats may be NaN, which never compares equal.
    auto text = [](const Metadata& md) {
      std::string out;
      for (const auto& [key, value] : md.entries()) {
        out += key + "=" + value.ToString(std::numeric_limits<size_t>::max()) + ";";
      }
      return out;
    };
    EXPECT_EQ(text((*again)->metadata()), text((*file)->metadata()));
    EXPECT_EQ((*again)->tensors().size(), (*file)->tensors().size());
  }
  return true;
}

TEST(MutationTest, SeedIsValid) {
  std::string seed = SeedFile();
  ASSERT_GT(seed.size(), 300u);
  EXPECT_TRUE(ParseAndWalk(seed));
}

TEST(MutationTest, EveryTruncationIsRejectedUntilTheLastTensorEnds) {
  std::string seed = SeedFile();
  auto full = GgufFile::FromBuffer(seed, "seed");
  ASSERT_TRUE(full.ok());
  const TensorInfo& last = (*full)->tensors().back();
  uint64_t needed = last.file_offset + last.nbytes;
  for (size_t len = 0; len < seed.size(); ++len) {
    std::string cut = seed.substr(0, len);
    bool ok = ParseAndWalk(cut);
    // A missing tail pad is tolerated (A.7); anything shorter is not.
    EXPECT_EQ(ok, len >= needed) << "length " << len;
  }
}

TEST(MutationTest, RandomBitFlipsNeverCrash) {
  std::string seed = SeedFile();
  std::mt19937_64 rng(1234);
  int accepted = 0;
  constexpr int kRounds = 1500;
  for (int round = 0; round < kRounds; ++round) {
    std::string m = seed;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      size_t pos = rng() % m.size();
      m[pos] = static_cast<char>(m[pos] ^ (1u << (rng() % 8)));
    }
    accepted += ParseAndWalk(m) ? 1 : 0;
  }
  // Flips in tensor data and padding keep the file valid; flips in the structure mostly do not.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, kRounds);
}

TEST(MutationTest, HugeValuesPatchedAtEveryOffsetAreRejectedQuickly) {
  std::string seed = SeedFile();
  auto full = GgufFile::FromBuffer(seed, "seed");
  ASSERT_TRUE(full.ok());
  const uint64_t header_end = (*full)->shards()[0].data_offset;
  const uint64_t patterns[] = {std::numeric_limits<uint64_t>::max(), uint64_t{1} << 63,
                               (uint64_t{1} << 30) + 1, 0xFFFFFFFFull, 1000000};
  for (uint64_t pos = 4; pos + 8 <= header_end; ++pos) {
    for (uint64_t p : patterns) {
      std::string m = seed;
      std::memcpy(m.data() + pos, &p, 8);
      ParseAndWalk(m);
      std::memcpy(m.data() + pos, &p, 4);  // also as a 32-bit field
      ParseAndWalk(seed.substr(0, pos) + m.substr(pos, 4) + seed.substr(pos + 4));
    }
  }
}

TEST(MutationTest, RandomGarbageAfterValidHeader) {
  std::mt19937_64 rng(99);
  for (int round = 0; round < 1500; ++round) {
    ByteBuilder b;
    b.Header(3, static_cast<int64_t>(rng() % 4), static_cast<int64_t>(rng() % 4));
    b.Raw(RandomBytes(rng, rng() % 200));
    ParseAndWalk(b.bytes());
  }
}

// ---- hand-made invalid files, each with the error it must produce ----

struct BadCase {
  std::string name;
  std::string bytes;
  std::string expect;  // substring of the error message
};

std::string OneKv(std::string_view key, int32_t type, std::string_view payload,
                  uint32_t version = 3) {
  ByteBuilder b;
  b.Header(version, 0, 1).Str(key).Put<int32_t>(type).Raw(payload);
  return b.bytes();
}

std::string OneTensor(std::string_view name, std::vector<int64_t> ne, int32_t type, uint64_t offset,
                      size_t data_bytes, std::string_view extra_kv = "", int64_t n_kv = 0) {
  ByteBuilder b;
  b.Header(3, 1, n_kv).Raw(extra_kv).Str(name).Put<uint32_t>(static_cast<uint32_t>(ne.size()));
  for (int64_t n : ne) b.Put<int64_t>(n);
  b.Put<int32_t>(type).Put<uint64_t>(offset).PadTo(32).Raw(std::string(data_bytes, '\0'));
  return b.bytes();
}

template <typename T>
std::string Le(T v) {
  return ByteBuilder().Put(v).bytes();
}

TEST(InvalidFileTest, EachIsRejectedWithAPreciseMessage) {
  ByteBuilder big_endian;
  big_endian.Raw("GGUF").Put<uint32_t>(0x03000000).Put<int64_t>(0).Put<int64_t>(0);
  ByteBuilder deep;
  deep.Header(3, 0, 1).Str("deep").Put<int32_t>(9);
  for (int i = 0; i < 20; ++i) deep.Put<int32_t>(9).Put<uint64_t>(1);
  ByteBuilder dup_key;
  dup_key.Header(3, 0, 2);
  dup_key.Str("k").Put<int32_t>(0).Put<uint8_t>(1).Str("k").Put<int32_t>(0).Put<uint8_t>(2);
  ByteBuilder dup_tensor;
  dup_tensor.Header(3, 2, 0);
  for (int i = 0; i < 2; ++i) {
    dup_tensor.Str("t").Put<uint32_t>(1).Put<int64_t>(1).Put<int32_t>(0).Put<uint64_t>(i * 32);
  }
  dup_tensor.PadTo(32).Raw(std::string(64, '\0'));
  std::string align_kv =
      ByteBuilder().Str("general.alignment").Put<int32_t>(4).Put<uint32_t>(48).bytes();
  std::string align_type =
      ByteBuilder().Str("general.alignment").Put<int32_t>(5).Put<int32_t>(64).bytes();

  std::vector<BadCase> cases = {
      {"magic", "GGML" + std::string(20, '\0'), "bad magic"},
      {"short", "GGU", "magic"},
      {"header", std::string("GGUF\3\0\0\0", 8), "header"},
      {"big endian", big_endian.bytes(), "big-endian"},
      {"v1", ByteBuilder().Header(1, 0, 0).bytes(), "version 1"},
      {"v4", ByteBuilder().Header(4, 0, 0).bytes(), "unsupported GGUF version 4"},
      {"negative tensors", ByteBuilder().Header(3, -1, 0).bytes(), "n_tensors is negative"},
      {"negative kv", ByteBuilder().Header(3, 0, -5).bytes(), "n_kv is negative"},
      {"huge kv", ByteBuilder().Header(3, 0, int64_t{1} << 60).bytes(), "cannot fit"},
      {"huge tensors", ByteBuilder().Header(3, int64_t{1} << 60, 0).bytes(), "cannot fit"},
      {"empty key", OneKv("", 0, Le<uint8_t>(1)), "empty key"},
      {"dup key", dup_key.bytes(), "duplicate metadata key 'k'"},
      {"unknown type", OneKv("k", 13, Le<uint8_t>(1)), "unknown value type id 13"},
      {"negative type", OneKv("k", -1, Le<uint8_t>(1)), "unknown value type id -1"},
      {"string too long", OneKv("k", 8, Le<uint64_t>((uint64_t{1} << 30) + 1)), "2^30"},
      {"string past end", OneKv("k", 8, Le<uint64_t>(100) + "abc"), "past the end"},
      {"key past end",
       ByteBuilder().Header(3, 0, 1).Put<uint64_t>(1000).Raw("k").Raw(std::string(9, 0)).bytes(),
       "past the end"},
      {"bool 2", OneKv("k", 7, Le<uint8_t>(2)), "bool byte is 2"},
      {"scalar truncated", OneKv("k", 10, Le<uint32_t>(1)), "key 'k'"},
      {"array elem type", OneKv("k", 9, Le<int32_t>(42) + Le<uint64_t>(0)), "unknown value type"},
      {"array too long", OneKv("k", 9, Le<int32_t>(0) + Le<uint64_t>(uint64_t{1} << 31)), "2^30"},
      {"array cannot fit", OneKv("k", 9, Le<int32_t>(4) + Le<uint64_t>(1000) + "abcd"),
       "cannot fit"},
      {"array bool", OneKv("k", 9, Le<int32_t>(7) + Le<uint64_t>(2) + "\1\3"), "element 1"},
      {"too deep", deep.bytes(), "nested deeper"},
      {"alignment value", OneTensor("t", {1}, 0, 0, 4, align_kv, 1), "power of two"},
      {"alignment type", OneTensor("t", {1}, 0, 0, 4, align_type, 1), "must be u32"},
      {"long name", OneTensor(std::string(64, 'n'), {1}, 0, 0, 4), "limit is 63"},
      {"n_dims", OneTensor("t", {1, 1, 1, 1, 1}, 0, 0, 4), "n_dims is 5"},
      {"negative ne", OneTensor("t", {4, -1}, 0, 0, 16), "ne[1] is negative"},
      {"removed type", OneTensor("t", {32}, 4, 0, 32), "unknown or removed tensor type id 4"},
      {"type range", OneTensor("t", {32}, 43, 0, 32), "tensor type id 43"},
      {"block size", OneTensor("t", {100}, 12, 0, 256), "not a multiple of the q4_K block"},
      {"overflow", OneTensor("t", {int64_t{1} << 40, int64_t{1} << 40}, 0, 0, 0), "overflows"},
      {"dup tensor", dup_tensor.bytes(), "duplicate tensor name 't'"},
      {"misaligned", OneTensor("t", {1}, 0, 16, 64), "not a multiple of the alignment"},
      {"out of bounds", OneTensor("t", {64}, 0, 0, 100), "runs past the end"},
      {"offset huge", OneTensor("t", {1}, 0, uint64_t{1} << 63, 32), "runs past the end"},
      {"data offset",
       ByteBuilder()
           .Header(3, 1, 0)
           .Str("t")
           .Put<uint32_t>(1)
           .Put<int64_t>(0)
           .Put<int32_t>(0)
           .Put<uint64_t>(0)
           .bytes(),
       "past the end of the file"},
  };
  for (const BadCase& c : cases) {
    auto file = GgufFile::FromBuffer(c.bytes, "bad.gguf");
    ASSERT_FALSE(file.ok()) << c.name;
    std::string message(file.status().message());
    EXPECT_THAT(message, HasSubstr(c.expect)) << c.name;
    EXPECT_THAT(message, HasSubstr("bad.gguf: offset ")) << c.name;
  }
}

TEST(InvalidFileTest, ErrorsGiveTheOffsetOfTheBadField) {
  // The bool byte of the only record sits after header (24) + key (8 + 1) + type (4).
  auto file = GgufFile::FromBuffer(OneKv("k", 7, Le<uint8_t>(9)), "f");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("f: offset 37:"));
}

TEST(ValidFileTest, HandMadeV2NestedAndOddLayoutsAreAccepted) {
  // v2, nested arrays of strings, empty arrays, zero-tensor file without padding.
  ByteBuilder b;
  b.Header(2, 0, 3);
  b.Str("n").Put<int32_t>(9).Put<int32_t>(9).Put<uint64_t>(2);
  b.Put<int32_t>(8).Put<uint64_t>(1).Str("hi");
  b.Put<int32_t>(8).Put<uint64_t>(0);
  b.Str("e").Put<int32_t>(9).Put<int32_t>(12).Put<uint64_t>(0);
  b.Str("s").Put<int32_t>(8).Str("");
  auto file = GgufFile::FromBuffer(b.bytes(), "v2");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->shards()[0].version, 2u);
  EXPECT_EQ((*file)->shards()[0].data_offset, b.size());
  EXPECT_EQ((*file)->metadata().Find("n")->ToString(), "[[\"hi\"], []]");
  EXPECT_EQ((*file)->metadata().Find("e")->AsArray()->elem_type, ValueType::kFloat64);

  // Tensors out of record order with a gap: fine leniently, rejected with strict_layout.
  ByteBuilder t;
  t.Header(3, 2, 0);
  t.Str("x").Put<uint32_t>(1).Put<int64_t>(8).Put<int32_t>(0).Put<uint64_t>(64);
  t.Str("y").Put<uint32_t>(2).Put<int64_t>(2).Put<int64_t>(1).Put<int32_t>(1).Put<uint64_t>(0);
  t.PadTo(32).Raw(std::string(96, '\0'));  // no tail pad after x's 32 bytes at 64..96
  auto lenient = GgufFile::FromBuffer(t.bytes(), "gap");
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_EQ((*lenient)->FindTensor("x")->nbytes, 32u);
  EXPECT_EQ((*lenient)->FindTensor("y")->ShapeString(), "[2, 1]");
  OpenOptions strict;
  strict.strict_layout = true;
  auto strict_file = GgufFile::FromBuffer(t.bytes(), "gap", strict);
  ASSERT_FALSE(strict_file.ok());
  EXPECT_THAT(std::string(strict_file.status().message()), HasSubstr("back-to-back"));
}

// The fuzzer's seed corpus (tests/fuzz/corpus/gguf_reader) must stay valid input. Set
// STEPSERVE_WRITE_FUZZ_SEEDS=1 to regenerate it from the files built here.
TEST(FuzzCorpusTest, CommittedSeedsAreValidFiles) {
  const std::filesystem::path dir =
      std::filesystem::path(STEPSERVE_SOURCE_DIR) / "tests/fuzz/corpus/gguf_reader";
  if (std::getenv("STEPSERVE_WRITE_FUZZ_SEEDS") != nullptr) {
    ByteBuilder v2;
    v2.Header(2, 1, 2);
    v2.Str("general.alignment").Put<int32_t>(4).Put<uint32_t>(64);
    v2.Str("n").Put<int32_t>(9).Put<int32_t>(9).Put<uint64_t>(1);
    v2.Put<int32_t>(8).Put<uint64_t>(1).Str("hi");
    v2.Str("t").Put<uint32_t>(2).Put<int64_t>(32).Put<int64_t>(1).Put<int32_t>(8);
    v2.Put<uint64_t>(0).PadTo(64).Raw(std::string(34, '\x11')).PadTo(64);
    ByteBuilder shard;
    shard.Header(3, 1, 3);
    shard.Str("split.no").Put<int32_t>(2).Put<uint16_t>(1);
    shard.Str("split.count").Put<int32_t>(2).Put<uint16_t>(2);
    shard.Str("split.tensors.count").Put<int32_t>(5).Put<int32_t>(2);
    shard.Str("w").Put<uint32_t>(1).Put<int64_t>(2).Put<int32_t>(30).Put<uint64_t>(0);
    shard.PadTo(32).Put<uint32_t>(0x3f803f80).PadTo(32);
    std::filesystem::create_directories(dir);
    testing::WriteFileBytes((dir / "all_types.gguf").string(), SeedFile());
    testing::WriteFileBytes((dir / "v2_nested_align64.gguf").string(), v2.bytes());
    testing::WriteFileBytes((dir / "split_shard.gguf").string(), shard.bytes());
    testing::WriteFileBytes((dir / "empty.gguf").string(), ByteBuilder().Header(3, 0, 0).bytes());
  }
  int n = 0;
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string bytes = ReadFileBytes(entry.path().string());
    total += bytes.size();
    EXPECT_TRUE(ParseAndWalk(bytes)) << entry.path();
    ++n;
  }
  EXPECT_GE(n, 4);
  EXPECT_LT(total, 100u * 1024);  // keep the committed corpus tiny
}

}  // namespace
}  // namespace stepserve::gguf
