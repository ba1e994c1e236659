// Runs `stepserve gguf inspect` on a small step35-like file, a split set and a corrupt file.
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/gguf/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/gguf/gguf_test_util.h"

namespace stepserve::gguf {
namespace {

using ::stepserve::gguf::testing::ReadFileBytes;
using ::stepserve::gguf::testing::TempDir;
using ::stepserve::gguf::testing::WriteFileBytes;
using ::testing::HasSubstr;
using ::testing::Not;

template <typename T>
Value V(T v) {
  return Value(Value::Storage(std::in_place_type<T>, v));
}

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Result RunInspect(const std::string& args) {
  std::string command =
      std::string(STEPSERVE_BINARY_DIR) + "/server/stepserve gguf inspect " + args + " 2>&1";
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::vector<std::string> WriteModel(const std::string& path, uint64_t split_max_bytes) {
  WriteOptions options;
  options.split_max_bytes = split_max_bytes;
  GgufWriter writer(options);
  Metadata& md = writer.metadata();
  md.Set("general.architecture", "step35");
  md.Set("general.name", "tiny");
  md.Set("step35.block_count", V<uint32_t>(4));
  md.Set("step35.nextn_predict_layers", V<uint32_t>(1));
  md.Set("step35.embedding_length", V<uint32_t>(4096));
  md.Set("step35.context_length", V<uint32_t>(262144));
  md.Set("step35.attention.head_count", Value::Int32Array({64, 96, 96, 96}));
  md.Set("step35.attention.head_count_kv", Value::Int32Array({8, 8, 8, 8}));
  md.Set("step35.attention.key_length", V<uint32_t>(128));
  md.Set("step35.attention.sliding_window", V<uint32_t>(512));
  md.Set("step35.attention.sliding_window_pattern", Value::BoolArray({false, true, true, true}));
  md.Set("step35.expert_count", V<uint32_t>(288));
  md.Set("step35.expert_used_count", V<uint32_t>(8));
  md.Set("step35.expert_feed_forward_length", V<uint32_t>(1280));
  md.Set("step35.rope.freq_base", V<float>(5000000.0f));
  md.Set("step35.rope.freq_base_swa", V<float>(10000.0f));
  std::vector<std::string> tokens;
  for (int i = 0; i < 1000; ++i) tokens.push_back("tok" + std::to_string(i));
  md.Set("tokenizer.ggml.tokens", Value::StringArray(tokens));
  EXPECT_TRUE(
      writer.AddTensor("token_embd.weight", GgmlType::kQ8_0, {64, 10}, std::string(680, '\1'))
          .ok());
  EXPECT_TRUE(writer
                  .AddTensor("blk.0.ffn_gate_exps.weight", GgmlType::kQ4_K, {256, 2, 3},
                             std::string(864, '\2'))
                  .ok());
  EXPECT_TRUE(
      writer.AddTensor("output_norm.weight", GgmlType::kF32, {64}, std::string(256, '\3')).ok());
  auto paths = writer.Write(path);
  EXPECT_TRUE(paths.ok()) << paths.status();
  return paths.ok() ? *paths : std::vector<std::string>{};
}

TEST(GgufInspectTest, DescribesAGoodFile) {
  TempDir dir;
  WriteModel(dir.File("tiny.gguf"), 0);
  Result r = RunInspect(dir.File("tiny.gguf"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("architecture: step35"));
  EXPECT_THAT(r.output, HasSubstr("64 (full) / 96 (swa)"));
  EXPECT_THAT(r.output, HasSubstr("1 full"));
  EXPECT_THAT(r.output, HasSubstr("vocab size"));
  EXPECT_THAT(r.output, HasSubstr("1000"));
  EXPECT_THAT(r.output, HasSubstr("(1000 items)"));  // long arrays summarised
  EXPECT_THAT(r.output, Not(HasSubstr("\"tok999\"")));
  EXPECT_THAT(r.output, HasSubstr("blk.0.ffn_gate_exps.weight"));
  EXPECT_THAT(r.output, HasSubstr("[256, 2, 3]"));
  EXPECT_THAT(r.output, HasSubstr("q4_K"));
  EXPECT_THAT(r.output, HasSubstr("total: 3 tensors, 1800 bytes"));
  EXPECT_THAT(r.output, HasSubstr("shards (1)"));

  Result all = RunInspect(dir.File("tiny.gguf") + " --all-metadata");
  EXPECT_EQ(all.exit_code, 0);
  EXPECT_THAT(all.output, HasSubstr("\"tok999\""));
}

TEST(GgufInspectTest, DescribesASplitSet) {
  TempDir dir;
  auto paths = WriteModel(dir.File("tiny.gguf"), 1000);
  ASSERT_EQ(paths.size(), 3u);
  Result r = RunInspect(paths[1]);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("shards (3)"));
  EXPECT_THAT(r.output, HasSubstr("tiny-00003-of-00003.gguf"));
}

TEST(GgufInspectTest, CorruptFileExitsOneWithTheReadersMessage) {
  TempDir dir;
  WriteModel(dir.File("tiny.gguf"), 0);
  std::string bytes = ReadFileBytes(dir.File("tiny.gguf"));
  WriteFileBytes(dir.File("cut.gguf"), bytes.substr(0, 200));
  Result r = RunInspect(dir.File("cut.gguf"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cut.gguf: offset "));
  Result missing = RunInspect(dir.File("nope.gguf"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.output, HasSubstr("nope.gguf"));
  Result usage = RunInspect("");
  EXPECT_EQ(usage.exit_code, 2);
}

}  // namespace
}  // namespace stepserve::gguf
