// Step graphs (CudaBackend::BeginStep/EndStep, engine/backend/cuda/cuda_backend_graph.cc): decode
// steps recorded once and replayed must give exactly the logits of the same steps run eagerly
// (the same kernels on the same inputs), across block boundaries, the sliding window, growing
// contexts and changes of batch size; and the replays must actually happen.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/kv_storage.h"
#include "engine/model/step35_model.h"
#include "engine/synth/make_model.h"
#include "kernels/common/cuda_check.h"
#include "tests/gpu/backend_test_util.h"

namespace stepserve::model {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kPagesPerSeq = 12;

struct Side {
  std::unique_ptr<Step35Model> model;
  std::unique_ptr<KvStorage> kv;
};

// Fast mode (int8 activations, on-device MoE): the configuration decode steps are recorded in.
Side Open(const std::string& path, bool graphs) {
  Side side;
  if (!graphs) setenv("STEPSERVE_CUDA_GRAPHS", "0", 1);
  absl::StatusOr<std::unique_ptr<Step35Model>> model =
      Step35Model::Load(path, {.backend = "cuda", .device = 0, .load_mtp = false});
  unsetenv("STEPSERVE_CUDA_GRAPHS");
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return side;
  side.model = *std::move(model);
  absl::StatusOr<KvStorage> kv =
      KvStorage::Create(side.model->backend(), side.model->hparams(),
                        {.block_size = kBlockSize, .full_blocks = 64, .swa_blocks = 64});
  EXPECT_TRUE(kv.ok()) << kv.status();
  if (kv.ok()) side.kv = std::make_unique<KvStorage>(*std::move(kv));
  return side;
}

TEST(StepGraphCudaTest, ReplayedDecodeStepsMatchEagerSteps) {
  if (kernels::CudaDeviceCount() == 0) GTEST_SKIP() << gpu_testing::kNoDeviceMessage;
  const std::string path =
      (std::filesystem::temp_directory_path() / "stepserve_step_graph_test.gguf").string();
  synth::MakeModelOptions options;
  options.preset = "tiny";
  options.out = path;
  options.seed = 5;
  options.recipe = "mix";
  absl::StatusOr<std::vector<synth::WrittenFile>> written = synth::MakeModel(options, nullptr);
  ASSERT_TRUE(written.ok()) << written.status();
  Side graph = Open(path, true), eager = Open(path, false);
  ASSERT_TRUE(graph.kv && eager.kv);
  const int64_t vocab = graph.model->n_vocab();
  const int64_t window = graph.model->hparams().sliding_window;

  // Three sequences with prompts of different lengths, each in its own pages.
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  const std::vector<int64_t> prompt_lengths = {3, kBlockSize - 1, window + 2};
  std::vector<std::vector<int32_t>> tables(prompt_lengths.size());
  std::vector<int64_t> lengths(prompt_lengths.size());
  for (size_t s = 0; s < prompt_lengths.size(); ++s) {
    for (int32_t p = 0; p < kPagesPerSeq; ++p)
      tables[s].push_back(static_cast<int32_t>(s) * kPagesPerSeq + p);
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_lengths[s]));
    for (int32_t& t : prompt) t = token(rng);
    BatchSequence seq{.tokens = prompt,
                      .start_pos = 0,
                      .full_table = tables[s],
                      .swa_table = tables[s],
                      .logit_rows = 1};
    ForwardOutput a, b;
    ASSERT_TRUE(graph.model->Forward({&seq, 1}, *graph.kv, &a).ok());
    ASSERT_TRUE(eager.model->Forward({&seq, 1}, *eager.kv, &b).ok());
    lengths[s] = prompt_lengths[s];
  }
  // Decode: all three for 40 steps (crossing block boundaries and the window), then the first two
  // only (another key: eager, recorded, replayed again).
  std::vector<int32_t> next(prompt_lengths.size());
  for (int step = 0; step < 60; ++step) {
    const size_t active = step < 40 ? 3 : 2;
    std::vector<BatchSequence> batch(active);
    for (size_t s = 0; s < active; ++s) {
      next[s] = token(rng);
      batch[s] = {.tokens = {&next[s], 1},
                  .start_pos = lengths[s],
                  .full_table = tables[s],
                  .swa_table = tables[s],
                  .logit_rows = 1};
    }
    ForwardOutput a, b;
    const absl::Status sa = graph.model->Forward(batch, *graph.kv, &a);
    ASSERT_TRUE(sa.ok()) << "step " << step << ": " << sa;
    ASSERT_TRUE(eager.model->Forward(batch, *eager.kv, &b).ok());
    ASSERT_EQ(a.logits.size(), active * static_cast<size_t>(vocab));
    ASSERT_EQ(a.logits.size(), b.logits.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < a.logits.size(); ++i) mismatches += a.logits[i] != b.logits[i];
    ASSERT_EQ(mismatches, 0u) << "step " << step << " (batch " << active << ")";
    for (size_t s = 0; s < active; ++s) ++lengths[s];
  }
  auto* cuda = dynamic_cast<CudaBackend*>(&graph.model->backend());
  ASSERT_NE(cuda, nullptr);
  EXPECT_GE(cuda->recorded_steps(), 2u);
  EXPECT_GE(cuda->replayed_steps(), 50u);
  auto* plain = dynamic_cast<CudaBackend*>(&eager.model->backend());
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->replayed_steps(), 0u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace stepserve::model
