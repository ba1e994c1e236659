#include "engine/synth/make_model.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/model/hparams.h"
#include "engine/quant/quant.h"
#include "engine/synth/metadata.h"
#include "gtest/gtest.h"

namespace stepserve::synth {
namespace {

namespace fs = std::filesystem;
using gguf::GgufFile;
using gguf::ValueType;

class MakeModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrFormat("synth_%d_%s", getpid(),
                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::vector<WrittenFile> Make(MakeModelOptions o) {
    o.threads = o.threads == 0 ? 2 : o.threads;
    std::ostringstream log;
    absl::StatusOr<std::vector<WrittenFile>> files = MakeModel(o, &log);
    EXPECT_TRUE(files.ok()) << files.status() << "\n" << log.str();
    log_ = log.str();
    return files.ok() ? *files : std::vector<WrittenFile>{};
  }

  static std::unique_ptr<GgufFile> Open(const std::string& path) {
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? std::move(*f) : nullptr;
  }

  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_;
  std::string log_;
};

// Expects `key` with scalar type `type`.
void ExpectScalar(const gguf::Metadata& md, const std::string& key, ValueType type) {
  const gguf::Value* v = md.Find(key);
  ASSERT_NE(v, nullptr) << key;
  EXPECT_EQ(v->type(), type) << key;
}

void ExpectArray(const gguf::Metadata& md, const std::string& key, ValueType elem, size_t n) {
  const gguf::Value* v = md.Find(key);
  ASSERT_NE(v, nullptr) << key;
  ASSERT_EQ(v->type(), ValueType::kArray) << key;
  EXPECT_EQ(v->AsArray()->elem_type, elem) << key;
  EXPECT_EQ(v->AsArray()->elems.size(), n) << key;
}

void ExpectStep35Keys(const gguf::Metadata& md, size_t block_count, bool has_nextn) {
  const auto u32 = ValueType::kUint32, f32 = ValueType::kFloat32;
  ExpectScalar(md, "general.architecture", ValueType::kString);
  ExpectScalar(md, "general.file_type", u32);
  ExpectScalar(md, "general.quantization_version", u32);
  ExpectScalar(md, "step35.block_count", u32);
  EXPECT_EQ(md.GetInt("step35.block_count").value(), static_cast<int64_t>(block_count));
  EXPECT_EQ(md.Contains("step35.nextn_predict_layers"), has_nextn);
  if (has_nextn) ExpectScalar(md, "step35.nextn_predict_layers", u32);
  for (const char* k :
       {"context_length", "embedding_length", "feed_forward_length", "attention.key_length",
        "attention.value_length", "attention.sliding_window", "rope.dimension_count",
        "rope.dimension_count_swa", "expert_count", "expert_used_count",
        "expert_feed_forward_length", "expert_shared_feed_forward_length", "expert_gating_func",
        "leading_dense_block_count", "moe_every_n_layers"}) {
    ExpectScalar(md, std::string("step35.") + k, u32);
  }
  for (const char* k : {"attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.freq_base_swa",
                        "expert_weights_scale"}) {
    ExpectScalar(md, std::string("step35.") + k, f32);
  }
  ExpectScalar(md, "step35.expert_weights_norm", ValueType::kBool);
  ExpectArray(md, "step35.attention.head_count", ValueType::kInt32, block_count);
  ExpectArray(md, "step35.attention.head_count_kv", ValueType::kInt32, block_count);
  ExpectArray(md, "step35.attention.sliding_window_pattern", ValueType::kBool, block_count);
  ExpectArray(md, "step35.swiglu_clamp_exp", ValueType::kFloat32, block_count);
  ExpectArray(md, "step35.swiglu_clamp_shexp", ValueType::kFloat32, block_count);
}

TEST_F(MakeModelTest, TinyCombinedFileHasSpecKeysAndTensors) {
  MakeModelOptions o;
  o.out = Path("tiny.gguf");
  const std::vector<WrittenFile> files = Make(o);
  ASSERT_EQ(files.size(), 1u);
  std::unique_ptr<GgufFile> f = Open(o.out);
  ASSERT_NE(f, nullptr);
  const gguf::Metadata& md = f->metadata();
  EXPECT_EQ(f->architecture(), "step35");
  ExpectStep35Keys(md, 9, true);
  EXPECT_EQ(md.GetInt("step35.nextn_predict_layers").value(), 3);
  EXPECT_EQ(md.GetIntArray("step35.attention.head_count").value(),
            (std::vector<int64_t>{4, 6, 6, 6, 4, 6, 6, 6, 6}));
  EXPECT_EQ(md.GetIntArray("step35.attention.sliding_window_pattern").value(),
            (std::vector<int64_t>{0, 1, 1, 1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(md.GetFloatArray("step35.swiglu_clamp_shexp").value()[1], 0.4f);
  EXPECT_EQ(md.GetInt("step35.rope.dimension_count").value(), 16);
  EXPECT_EQ(md.GetFloat("step35.expert_weights_scale").value(), 2.5);
  EXPECT_EQ(md.GetInt("step35.attention.sliding_window").value(), 16);

  // Tokenizer keys (A.11 types).
  EXPECT_EQ(md.GetString("tokenizer.ggml.model").value(), "gpt2");
  EXPECT_EQ(md.GetString("tokenizer.ggml.pre").value(), "deepseek-v3");
  const std::vector<std::string> tokens = md.GetStringArray("tokenizer.ggml.tokens").value();
  ExpectArray(md, "tokenizer.ggml.token_type", ValueType::kInt32, tokens.size());
  ExpectArray(md, "tokenizer.ggml.merges", ValueType::kString,
              md.GetStringArray("tokenizer.ggml.merges")->size());
  EXPECT_GE(md.GetStringArray("tokenizer.ggml.merges")->size(), 2000u);
  for (const char* k : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                        "tokenizer.ggml.padding_token_id"}) {
    ExpectScalar(md, k, ValueType::kUint32);
  }
  ExpectScalar(md, "tokenizer.ggml.add_bos_token", ValueType::kBool);
  EXPECT_EQ(tokens[md.GetInt("tokenizer.ggml.eos_token_id").value()], "<|im_end|>");
  EXPECT_EQ(tokens[0], "<｜begin▁of▁sentence｜>");
  const std::string tmpl = md.GetString("tokenizer.chat_template").value();
  EXPECT_NE(tmpl.find("<|im_start|>assistant\\n<think>\\n"), std::string::npos);
  const std::string shared =
      std::string(STEPSERVE_SHARED_DIR) + "/ref/templates/StepFun3.5-Flash.jinja";
  if (fs::exists(shared)) {
    EXPECT_EQ(tmpl, ReadAll(shared)) << "regenerate step_chat_template.inc";
  }

  // Tensors: count formula, shapes and types per layer kind.
  EXPECT_EQ(f->tensors().size(), 4u + 2 * 12 + 4 * 17 + 3 * 17);
  const int64_t V = static_cast<int64_t>(tokens.size());
  auto shape = [&](const std::string& name) {
    const gguf::TensorInfo* t = f->FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? t->ShapeString() : std::string("missing");
  };
  auto type = [&](const std::string& name) {
    const gguf::TensorInfo* t = f->FindTensor(name);
    return t ? t->type : GgmlType::kI8;
  };
  EXPECT_EQ(shape("token_embd.weight"), absl::StrFormat("[256, %d]", V));
  EXPECT_EQ(shape("output.weight"), absl::StrFormat("[256, %d]", V));
  EXPECT_EQ(shape("rope_freqs.weight"), "[16]");
  for (int il = 0; il < 9; ++il) {
    const int heads = (il == 0 || il == 4) ? 4 : 6;
    const std::string b = absl::StrFormat("blk.%d.", il);
    EXPECT_EQ(shape(b + "attn_q.weight"), absl::StrFormat("[256, %d]", heads * 32));
    EXPECT_EQ(shape(b + "attn_k.weight"), "[256, 64]");
    EXPECT_EQ(shape(b + "attn_v.weight"), "[256, 64]");
    EXPECT_EQ(shape(b + "attn_gate.weight"), absl::StrFormat("[256, %d]", heads));
    EXPECT_EQ(shape(b + "attn_output.weight"), absl::StrFormat("[%d, 256]", heads * 32));
    EXPECT_EQ(shape(b + "attn_q_norm.weight"), "[32]");
    EXPECT_EQ(type(b + "attn_norm.weight"), GgmlType::kF32);
    const bool moe = il >= 2 && il <= 5;
    if (moe) {
      EXPECT_EQ(shape(b + "ffn_gate_inp.weight"), "[256, 16]");
      EXPECT_EQ(type(b + "ffn_gate_inp.weight"), GgmlType::kF32);
      EXPECT_EQ(shape(b + "exp_probs_b.bias"), "[16]");
      EXPECT_EQ(shape(b + "ffn_gate_exps.weight"), "[256, 64, 16]");
      EXPECT_EQ(shape(b + "ffn_down_exps.weight"), "[64, 256, 16]");
      EXPECT_EQ(shape(b + "ffn_up_shexp.weight"), "[256, 64]");
      EXPECT_EQ(f->FindTensor(b + "ffn_gate.weight"), nullptr);
    } else {
      EXPECT_EQ(shape(b + "ffn_gate.weight"), "[256, 512]");
      EXPECT_EQ(shape(b + "ffn_down.weight"), "[512, 256]");
      EXPECT_EQ(f->FindTensor(b + "ffn_gate_inp.weight"), nullptr);
    }
    if (il >= 6) {
      EXPECT_EQ(shape(b + "nextn.eh_proj.weight"), "[512, 256]");
      EXPECT_EQ(shape(b + "nextn.shared_head_head.weight"), absl::StrFormat("[256, %d]", V));
      EXPECT_EQ(type(b + "attn_q.weight"), GgmlType::kQ8_0);  // mix: MTP Q8_0
    }
  }
  EXPECT_EQ(type("token_embd.weight"), GgmlType::kF16);
  EXPECT_EQ(type("blk.2.ffn_gate_exps.weight"), GgmlType::kQ4_K);
  EXPECT_EQ(type("output.weight"), GgmlType::kQ6_K);
  EXPECT_NE(log_.find("note: blk.2.ffn_down_exps.weight"), std::string::npos) << log_;

  // An independent reader of the metadata (engine/model) accepts the file.
  absl::StatusOr<model::Hparams> hp = model::Hparams::FromMetadata(md);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->n_layer, 6);
  EXPECT_EQ(hp->layers[0].n_rot, 16);
  EXPECT_EQ(hp->layers[1].n_rot, 32);
}

TEST_F(MakeModelTest, F32RecipeValuesHaveTheIntendedScales) {
  MakeModelOptions o;
  o.out = Path("f32.gguf");
  o.recipe = "f32";
  o.mtp = MtpLayout::kNone;
  Make(o);
  std::unique_ptr<GgufFile> f = Open(o.out);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->metadata().GetInt("general.file_type").value(), 0);
  for (const gguf::TensorInfo& t : f->tensors()) {
    ASSERT_EQ(t.type, GgmlType::kF32) << t.name;
    const float* v = reinterpret_cast<const float*>(t.data);
    const int64_t n = t.n_elements();
    double sum2 = 0, lo = 1e30, hi = -1e30;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(v[i])) << t.name;
      sum2 += double(v[i]) * v[i];
      lo = std::min<double>(lo, v[i]);
      hi = std::max<double>(hi, v[i]);
    }
    const double rms = std::sqrt(sum2 / n);
    if (t.name.find("norm") != std::string::npos) {
      EXPECT_GE(lo, 0.9) << t.name;
      EXPECT_LE(hi, 1.1) << t.name;
    } else if (t.name.find("exp_probs_b") != std::string::npos) {
      EXPECT_GE(lo, -0.1) << t.name;
      EXPECT_LE(hi, 0.1) << t.name;
      EXPECT_GT(hi - lo, 0.05) << t.name;
    } else if (t.name == "rope_freqs.weight") {
      EXPECT_EQ(v[0], 1.0f);
      EXPECT_EQ(v[7], 2.0f);
    } else if (t.name == "token_embd.weight") {
      EXPECT_NEAR(rms, 1.0, 0.05);
    } else if (t.name.find("gate_inp") != std::string::npos) {
      EXPECT_NEAR(rms, 0.5 / std::sqrt(double(t.ne[0])), 0.1 / std::sqrt(double(t.ne[0])));
    } else {
      EXPECT_NEAR(rms * std::sqrt(double(t.ne[0])), 1.5, 0.15) << t.name;  // tiny gain 1.5
    }
  }
}

TEST_F(MakeModelTest, SameSeedGivesIdenticalBytesWhateverTheThreadCount) {
  MakeModelOptions o;
  o.seed = 7;
  o.out = Path("a.gguf");
  o.threads = 1;
  Make(o);
  o.out = Path("b.gguf");
  o.threads = 3;
  Make(o);
  o.out = Path("c.gguf");
  o.seed = 8;
  Make(o);
  const std::string a = ReadAll(Path("a.gguf"));
  EXPECT_GT(a.size(), 1000000u);
  EXPECT_EQ(a, ReadAll(Path("b.gguf")));
  EXPECT_NE(a, ReadAll(Path("c.gguf")));
  // Quantized tensors decode to finite values of a sensible size.
  std::unique_ptr<GgufFile> f = Open(Path("a.gguf"));
  ASSERT_NE(f, nullptr);
  for (const char* name : {"blk.2.ffn_gate_exps.weight", "blk.2.ffn_down_shexp.weight",
                           "blk.0.attn_q.weight", "output.weight"}) {
    const gguf::TensorInfo* t = f->FindTensor(name);
    ASSERT_NE(t, nullptr);
    std::vector<float> row(static_cast<size_t>(t->ne[0]));
    ASSERT_TRUE(quant::DequantizeRow(t->type, t->data, row.data(), t->ne[0]).ok()) << name;
    double sum2 = 0;
    for (float x : row) {
      ASSERT_TRUE(std::isfinite(x));
      sum2 += double(x) * x;
    }
    const double rms_scaled = std::sqrt(sum2 / row.size()) * std::sqrt(double(t->ne[0]));
    EXPECT_GT(rms_scaled, 0.75) << name;
    EXPECT_LT(rms_scaled, 3.0) << name;
  }
}

TEST_F(MakeModelTest, SeparateMtpLayout) {
  MakeModelOptions o;
  o.out = Path("combined.gguf");
  Make(o);
  o.out = Path("model.gguf");
  o.mtp = MtpLayout::kSeparate;
  const std::vector<WrittenFile> files = Make(o);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(MtpCompanionPath(Path("model.gguf")), Path("mtp-model.gguf"));
  ASSERT_TRUE(fs::exists(Path("mtp-model.gguf")));

  std::unique_ptr<GgufFile> trunk = Open(Path("model.gguf"));
  std::unique_ptr<GgufFile> mtp = Open(Path("mtp-model.gguf"));
  std::unique_ptr<GgufFile> combined = Open(Path("combined.gguf"));
  ASSERT_TRUE(trunk && mtp && combined);
  ExpectStep35Keys(trunk->metadata(), 6, false);
  EXPECT_EQ(trunk->tensors().size(), 4u + 2 * 12 + 4 * 17);
  EXPECT_EQ(trunk->FindTensor("blk.6.attn_norm.weight"), nullptr);
  // MTP-only: identical metadata to the combined file, globals + blk.6..8 only.
  EXPECT_TRUE(mtp->metadata() == combined->metadata());
  EXPECT_EQ(mtp->tensors().size(), 4u + 3 * 17);
  EXPECT_EQ(mtp->FindTensor("blk.0.attn_norm.weight"), nullptr);
  for (const char* name : {"token_embd.weight", "output_norm.weight", "output.weight",
                           "rope_freqs.weight", "blk.8.nextn.eh_proj.weight"}) {
    const gguf::TensorInfo* a = mtp->FindTensor(name);
    const gguf::TensorInfo* b = combined->FindTensor(name);
    ASSERT_TRUE(a && b) << name;
    ASSERT_EQ(a->nbytes, b->nbytes);
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << name << " differs";
  }
  for (const gguf::TensorInfo& t : mtp->tensors()) {
    if (t.name.rfind("blk.", 0) == 0) {
      EXPECT_GE(std::stoi(t.name.substr(4)), 6) << t.name;
    }
  }
}

TEST_F(MakeModelTest, SplitOutputOpensAsOneModel) {
  MakeModelOptions o;
  o.out = Path("whole.gguf");
  Make(o);
  o.out = Path("split.gguf");
  absl::StatusOr<uint64_t> size = ParseByteSize("1M");
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 1u << 20);
  EXPECT_FALSE(ParseByteSize("12X").ok());
  EXPECT_EQ(ParseByteSize("2G").value(), uint64_t{2} << 30);
  o.split_max_bytes = *size;
  const std::vector<WrittenFile> files = Make(o);
  ASSERT_EQ(files.size(), 1u);
  ASSERT_GT(files[0].paths.size(), 1u);
  const int n_shards = static_cast<int>(files[0].paths.size());
  for (int k = 0; k < n_shards; ++k) {
    EXPECT_EQ(files[0].paths[k], gguf::SplitShardPath(Path("split"), k, n_shards));
  }
  std::unique_ptr<GgufFile> split = Open(files[0].paths[0]);
  std::unique_ptr<GgufFile> whole = Open(Path("whole.gguf"));
  ASSERT_TRUE(split && whole);
  EXPECT_EQ(split->shards().size(), files[0].paths.size());
  ASSERT_EQ(split->tensors().size(), whole->tensors().size());
  EXPECT_EQ(split->metadata().GetInt("step35.block_count").value(), 9);
  for (const gguf::TensorInfo& t : whole->tensors()) {
    const gguf::TensorInfo* s = split->FindTensor(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    ASSERT_EQ(s->nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(s->data, t.data, t.nbytes), 0) << t.name;
  }
}

TEST_F(MakeModelTest, RejectsBadOptions) {
  MakeModelOptions o;
  o.out = Path("x.txt");
  EXPECT_FALSE(MakeModel(o, nullptr).ok());
  o.out = Path("x.gguf");
  o.preset = "step-9";
  EXPECT_FALSE(MakeModel(o, nullptr).ok());
  o.preset = "tiny";
  o.layers = 7;
  EXPECT_FALSE(MakeModel(o, nullptr).ok());
  o.layers = 0;
  o.type_overrides = {{"attn", "q5_0"}};  // no generator for Q5_0 blocks
  EXPECT_FALSE(MakeModel(o, nullptr).ok());
}

}  // namespace
}  // namespace stepserve::synth
