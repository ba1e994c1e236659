// Bad model files give clear errors naming the key or tensor: the model binding's contract.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/hparams.h"
#include "engine/model/step35_model.h"
#include "engine/synth/make_model.h"

namespace stepserve::model {
namespace {

namespace fs = std::filesystem;

const std::string& TinyPath() {
  static const std::string path = [] {
    const std::string out = (fs::temp_directory_path() / "stepserve_weights_test.gguf").string();
    synth::MakeModelOptions options;
    options.out = out;
    options.seed = 3;
    EXPECT_TRUE(synth::MakeModel(options, nullptr).ok());
    return out;
  }();
  return path;
}

// Rewrites the tiny model through `edit_metadata` and `edit_tensor` (return false to drop a
// tensor; may change its type, shape and bytes) and loads the result.
struct TensorEdit {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
  std::string bytes;
};

absl::Status LoadEdited(const std::function<void(gguf::Metadata&)>& edit_metadata,
                        const std::function<bool(TensorEdit&)>& edit_tensor) {
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> source = gguf::GgufFile::Open(TinyPath());
  EXPECT_TRUE(source.ok()) << source.status();
  gguf::GgufWriter writer;
  for (const auto& [key, value] : (*source)->metadata().entries()) {
    writer.metadata().Set(key, value);
  }
  if (edit_metadata) edit_metadata(writer.metadata());
  for (const gguf::TensorInfo& info : (*source)->tensors()) {
    TensorEdit t{info.name, info.type,
                 std::vector<int64_t>(info.ne.begin(), info.ne.begin() + info.n_dims),
                 std::string(reinterpret_cast<const char*>(info.data), info.nbytes)};
    if (edit_tensor && !edit_tensor(t)) continue;
    EXPECT_TRUE(writer.AddTensor(t.name, t.type, t.ne, t.bytes).ok());
  }
  const std::string out = (fs::temp_directory_path() / "stepserve_weights_test_edit.gguf").string();
  absl::StatusOr<std::vector<std::string>> written = writer.Write(out);
  EXPECT_TRUE(written.ok()) << written.status();
  absl::StatusOr<std::unique_ptr<Step35Model>> model = Step35Model::Load(out, {.num_threads = 1});
  fs::remove(out);
  return model.status();
}

void ExpectError(const absl::Status& status, absl::StatusCode code, const std::string& needle) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_NE(status.message().find(needle), std::string::npos)
      << "'" << status.message() << "' lacks '" << needle << "'";
}

TEST(WeightsTest, UnchangedCopyLoads) { EXPECT_TRUE(LoadEdited(nullptr, nullptr).ok()); }

TEST(WeightsTest, MissingTensorIsNamed) {
  ExpectError(
      LoadEdited(nullptr, [](TensorEdit& t) { return t.name != "blk.3.ffn_up_exps.weight"; }),
      absl::StatusCode::kNotFound, "blk.3.ffn_up_exps.weight");
}

TEST(WeightsTest, WrongShapeIsNamedWithBothShapes) {
  ExpectError(LoadEdited(nullptr,
                         [](TensorEdit& t) {
                           if (t.name == "blk.1.attn_gate.weight") {
                             // [256, 6] -> [256, 5]: drop one head row.
                             t.bytes.resize(t.bytes.size() / 6 * 5);
                             t.ne[1] = 5;
                           }
                           return true;
                         }),
              absl::StatusCode::kInvalidArgument, "blk.1.attn_gate.weight has shape [256, 5]");
}

TEST(WeightsTest, UnsupportedTypeIsNamed) {
  ExpectError(LoadEdited(nullptr,
                         [](TensorEdit& t) {
                           if (t.name == "blk.0.attn_q.weight") {
                             // Same byte count per row is irrelevant: Q4_1 is simply unsupported.
                             t.type = GgmlType::kQ4_1;
                             t.bytes.assign(RowBytes(GgmlType::kQ4_1, t.ne[0]) * t.ne[1], '\0');
                           }
                           return true;
                         }),
              absl::StatusCode::kInvalidArgument, "blk.0.attn_q.weight has type q4_1");
}

TEST(WeightsTest, NormMustBeF32) {
  ExpectError(LoadEdited(nullptr,
                         [](TensorEdit& t) {
                           if (t.name == "output_norm.weight") {
                             t.type = GgmlType::kF16;
                             t.bytes.resize(t.bytes.size() / 2);
                           }
                           return true;
                         }),
              absl::StatusCode::kInvalidArgument, "output_norm.weight has type f16");
}

TEST(HparamsTest, WrongArchitectureAndBadKeysAreNamed) {
  ExpectError(
      LoadEdited([](gguf::Metadata& md) { md.Set("general.architecture", "llama"); }, nullptr),
      absl::StatusCode::kInvalidArgument, "unsupported architecture 'llama'");
  ExpectError(
      LoadEdited([](gguf::Metadata& md) { md.Erase("step35.attention.sliding_window"); }, nullptr),
      absl::StatusCode::kInvalidArgument, "step35.attention.sliding_window");
  ExpectError(LoadEdited(
                  [](gguf::Metadata& md) {
                    md.Set("step35.attention.head_count", gguf::Value::Int32Array({4, 6, 6}));
                  },
                  nullptr),
              absl::StatusCode::kInvalidArgument,
              "step35.attention.head_count: array has 3 entries, block_count is 9");
  ExpectError(
      LoadEdited(
          [](gguf::Metadata& md) { md.Set("step35.expert_gating_func", gguf::Value(uint32_t{4})); },
          nullptr),
      absl::StatusCode::kInvalidArgument, "expert_gating_func = 4 is not supported");
}

TEST(HparamsTest, TinyPresetDerivedValues) {
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(TinyPath());
  ASSERT_TRUE(file.ok());
  absl::StatusOr<Hparams> hp = Hparams::FromMetadata((*file)->metadata());
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->n_layer, 6);
  EXPECT_EQ(hp->n_nextn, 3);
  EXPECT_EQ(hp->layers[0].n_head, 4);
  EXPECT_FALSE(hp->layers[0].is_swa);
  EXPECT_EQ(hp->layers[0].n_rot, 16);  // partial rotation on full layers
  EXPECT_EQ(hp->layers[1].n_rot, 32);  // sliding layers rotate the whole head
  EXPECT_FLOAT_EQ(hp->layers[0].rope_base, 5e6f);
  EXPECT_FLOAT_EQ(hp->layers[1].rope_base, 1e4f);
  EXPECT_TRUE(hp->layers[6].is_mtp);
  EXPECT_FLOAT_EQ(hp->layers[4].clamp_exp, 0.5f);
  EXPECT_FLOAT_EQ(hp->layers[1].clamp_shexp, 0.4f);
  EXPECT_EQ(hp->n_rot_max, 32);
}

}  // namespace
}  // namespace stepserve::model
