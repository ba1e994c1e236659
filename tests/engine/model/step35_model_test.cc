// The paged, batched CPU forward pass against the plain reference evaluation of the spec's
// equations, on the tiny synthetic model (6 trunk layers: dense + MoE, full + sliding window 16,
// 3 MTP heads).
#include "engine/model/step35_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "engine/sampling/logits_ops.h"
#include "engine/synth/make_model.h"
#include "tests/engine/model/reference_step35.h"

namespace stepserve::model {
namespace {

using testing::ReferenceStep35;
using testing::Vec;

constexpr int32_t kBlockSize = 16;

// Where MakeTiny writes the tiny model of `recipe`.
std::string TinyPath(const std::string& recipe) {
  return (std::filesystem::temp_directory_path() / ("stepserve_model_test_" + recipe + ".gguf"))
      .string();
}

std::string MakeTiny(const std::string& recipe) {
  const std::string path = TinyPath(recipe);
  synth::MakeModelOptions options;
  options.preset = "tiny";
  options.out = path;
  options.seed = 11;
  options.recipe = recipe;
  absl::StatusOr<std::vector<synth::WrittenFile>> written = synth::MakeModel(options, nullptr);
  EXPECT_TRUE(written.ok()) << written.status();
  return path;
}

// ‖a − b‖ / ‖b‖ over a row.
double RelErr(const float* a, const Vec& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

std::vector<int32_t> RandomTokens(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % vocab);
  return tokens;
}

// Block tables of one sequence: pages [first, first + count).
std::vector<int32_t> Pages(int32_t first, int32_t count) {
  std::vector<int32_t> table(count);
  std::iota(table.begin(), table.end(), first);
  return table;
}

class Step35ModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Step35Model>> model =
        Step35Model::Load(MakeTiny(GetParam()), {.num_threads = 2});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    absl::StatusOr<KvStorage> kv =
        KvStorage::Create(model_->backend(), model_->hparams(),
                          {.block_size = kBlockSize, .full_blocks = 64, .swa_blocks = 64});
    ASSERT_TRUE(kv.ok()) << kv.status();
    kv_ = std::make_unique<KvStorage>(*std::move(kv));
    reference_ = std::make_unique<ReferenceStep35>(model_->file(), model_->hparams());
  }

  std::unique_ptr<Step35Model> model_;
  std::unique_ptr<KvStorage> kv_;
  std::unique_ptr<ReferenceStep35> reference_;
};

// Bound: F32 activations and accumulation against a double reference of the same dequantized
// weights; 40 tokens (2.5 windows) through 6 layers.
constexpr double kLogitBound = 2e-4;

TEST_P(Step35ModelTest, PrefillMatchesReferencePastTheSlidingWindow) {
  const std::vector<int32_t> tokens = RandomTokens(40, model_->n_vocab(), 1);
  std::vector<Vec> ref_logits, ref_hidden;
  reference_->Run(tokens, &ref_logits, &ref_hidden);
  const std::vector<int32_t> table = Pages(0, 3);
  BatchSequence seq{
      .tokens = tokens, .start_pos = 0, .full_table = table, .swa_table = table, .logit_rows = 40};
  ForwardOutput out;
  out.logits.assign(1, NAN);
  ASSERT_TRUE(model_->Forward({&seq, 1}, *kv_, &out, {.want_hidden = true}).ok());
  const int64_t v = model_->n_vocab(), d = model_->hparams().n_embd;
  ASSERT_EQ(out.logits.size(), static_cast<size_t>(40 * v));
  ASSERT_EQ(out.hidden.size(), static_cast<size_t>(40 * d));
  double worst = 0;
  for (int t = 0; t < 40; ++t) {
    worst = std::max(worst, RelErr(out.logits.data() + t * v, ref_logits[t]));
    EXPECT_LT(RelErr(out.hidden.data() + t * d, ref_hidden[t]), kLogitBound) << "row " << t;
  }
  EXPECT_LT(worst, kLogitBound);
  RecordProperty("worst_logit_rel_err", std::to_string(worst));
}

TEST_P(Step35ModelTest, IncrementalDecodeMatchesFullRecompute) {
  const int n = 36;
  const std::vector<int32_t> tokens = RandomTokens(n, model_->n_vocab(), 2);
  const std::vector<int32_t> table = Pages(5, 3);  // not starting at page 0
  const int64_t v = model_->n_vocab();
  // Full recompute in one step.
  BatchSequence full{.tokens = tokens, .full_table = table, .swa_table = table, .logit_rows = n};
  ForwardOutput all;
  ASSERT_TRUE(model_->Forward({&full, 1}, *kv_, &all).ok());
  // Prompt of 7, then one token at a time (into other pages).
  const std::vector<int32_t> table2 = Pages(20, 3);
  double worst = 0;
  int pos = 0;
  while (pos < n) {
    const int count = pos == 0 ? 7 : 1;
    BatchSequence step{.tokens = std::span<const int32_t>(tokens).subspan(pos, count),
                       .start_pos = pos,
                       .full_table = table2,
                       .swa_table = table2,
                       .logit_rows = 1};
    ForwardOutput out;
    ASSERT_TRUE(model_->Forward({&step, 1}, *kv_, &out).ok());
    const int row = pos + count - 1;
    double max_abs = 0;
    for (int64_t i = 0; i < v; ++i) {
      max_abs = std::max<double>(max_abs, std::abs(out.logits[i] - all.logits[row * v + i]));
    }
    worst = std::max(worst, max_abs);
    pos += count;
  }
  EXPECT_LT(worst, 1e-4) << "max abs logit difference, incremental vs recompute";
}

TEST_P(Step35ModelTest, FusedProjectionsGiveTheSameLogits) {
  // Fusion is off by default; forced on here so the fused paths (q/k/v/gate column views, gate/up
  // halves, shared expert) run on the CPU.
  absl::StatusOr<std::unique_ptr<Step35Model>> fused_model = Step35Model::Load(
      MakeTiny(GetParam()), {.num_threads = 2, .fuse_projections = LoadOptions::Fusion::kOn});
  ASSERT_TRUE(fused_model.ok()) << fused_model.status();
  Step35Model& fused = **fused_model;
  const LayerWeights& w0 = fused.weights().layers[0];
  ASSERT_NE(fused.placed().Fused(w0.attn_q), nullptr) << "layer 0's projections were not fused";
  EXPECT_EQ(model_->placed().Fused(w0.attn_q), nullptr) << "fused by default";
  absl::StatusOr<KvStorage> kv =
      KvStorage::Create(fused.backend(), fused.hparams(),
                        {.block_size = kBlockSize, .full_blocks = 64, .swa_blocks = 64});
  ASSERT_TRUE(kv.ok()) << kv.status();
  const std::vector<int32_t> tokens = RandomTokens(24, model_->n_vocab(), 9);
  const std::vector<int32_t> table = Pages(0, 3);
  const int64_t v = model_->n_vocab();
  for (int pos = 0; pos < 24;) {
    const int count = pos == 0 ? 20 : 1;  // a prompt, then decode steps
    BatchSequence step{.tokens = std::span<const int32_t>(tokens).subspan(pos, count),
                       .start_pos = pos,
                       .full_table = table,
                       .swa_table = table,
                       .logit_rows = count};
    ForwardOutput want, got;
    ASSERT_TRUE(model_->Forward({&step, 1}, *kv_, &want, {.want_hidden = true}).ok());
    ASSERT_TRUE(fused.Forward({&step, 1}, *kv, &got, {.want_hidden = true}).ok());
    ASSERT_EQ(got.logits.size(), want.logits.size());
    for (int r = 0; r < count; ++r) {
      const Vec row(want.logits.begin() + r * v, want.logits.begin() + (r + 1) * v);
      EXPECT_LT(RelErr(got.logits.data() + r * v, row), 1e-6) << "position " << pos + r;
    }
    pos += count;
  }
}

TEST_P(Step35ModelTest, LogitCandidatesAreTheTopOfTheFullLogits) {
  const std::vector<int32_t> tokens = RandomTokens(12, model_->n_vocab(), 4);
  const std::vector<int32_t> table = Pages(0, 2), table2 = Pages(4, 2);
  const int64_t v = model_->n_vocab();
  BatchSequence seq{
      .tokens = tokens, .start_pos = 0, .full_table = table, .swa_table = table, .logit_rows = 3};
  ForwardOutput full, top;
  ASSERT_TRUE(model_->Forward({&seq, 1}, *kv_, &full).ok());
  seq.full_table = seq.swa_table = table2;
  ASSERT_TRUE(model_->Forward({&seq, 1}, *kv_, &top, {.logit_top_k = 7}).ok());
  EXPECT_TRUE(top.logits.empty()) << "candidates come instead of logits";
  ASSERT_EQ(top.candidates.k, 7);
  ASSERT_EQ(top.candidates.ids.size(), 21u);
  for (int r = 0; r < 3; ++r) {
    const std::span<const float> row(full.logits.data() + r * v, static_cast<size_t>(v));
    EXPECT_EQ(top.candidates.argmax[r], Argmax(row));
    EXPECT_NEAR(top.candidates.log_sum_exp[r], LogSumExp(row), 1e-4);
    std::vector<int32_t> order(static_cast<size_t>(v));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    for (int j = 0; j < 7; ++j) {
      EXPECT_EQ(top.candidates.ids[r * 7 + j], order[j]) << "row " << r << " rank " << j;
      EXPECT_EQ(top.candidates.values[r * 7 + j], row[order[j]]);
    }
  }
  // Out of range k is a clear error.
  EXPECT_EQ(model_->Forward({&seq, 1}, *kv_, &top, {.logit_top_k = 257}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(Step35ModelTest, BatchOfMixedSequencesGivesEachItsOwnLogits) {
  const int64_t v = model_->n_vocab();
  const std::vector<int32_t> a = RandomTokens(23, v, 3), b = RandomTokens(5, v, 4),
                             c = RandomTokens(30, v, 5);
  const std::vector<int32_t> ta = Pages(0, 2), tb = Pages(2, 1), tc = Pages(3, 2);
  // Alone.
  std::vector<std::vector<float>> alone;
  for (auto [tokens, table] : {std::pair{&a, &ta}, std::pair{&b, &tb}, std::pair{&c, &tc}}) {
    BatchSequence seq{
        .tokens = *tokens, .full_table = *table, .swa_table = *table, .logit_rows = 2};
    ForwardOutput out;
    ASSERT_TRUE(model_->Forward({&seq, 1}, *kv_, &out).ok());
    alone.push_back(out.logits);
  }
  // Together, into other pages.
  const std::vector<int32_t> ua = Pages(10, 2), ub = Pages(12, 1), uc = Pages(13, 2);
  const BatchSequence batch[] = {
      {.tokens = a, .full_table = ua, .swa_table = ua, .logit_rows = 2},
      {.tokens = b, .full_table = ub, .swa_table = ub, .logit_rows = 2},
      {.tokens = c, .full_table = uc, .swa_table = uc, .logit_rows = 2},
  };
  ForwardOutput together;
  ASSERT_TRUE(model_->Forward(batch, *kv_, &together).ok());
  ASSERT_EQ(together.logits.size(), static_cast<size_t>(6 * v));
  double worst = 0;
  for (int s = 0; s < 3; ++s) {
    for (int64_t i = 0; i < 2 * v; ++i) {
      worst = std::max<double>(worst, std::abs(together.logits[s * 2 * v + i] - alone[s][i]));
    }
  }
  EXPECT_LT(worst, 1e-4);
}

TEST_P(Step35ModelTest, MtpHeadsMatchTheSpecEquations) {
  ASSERT_EQ(model_->num_mtp_heads(), 3);
  const int n = 24;
  const int64_t v = model_->n_vocab(), d = model_->hparams().n_embd;
  const std::vector<int32_t> tokens = RandomTokens(n, v, 6);
  std::vector<Vec> ref_logits, ref_hidden;
  reference_->Run(tokens, &ref_logits, &ref_hidden);
  // Row t pairs token t with the trunk's h_final of row t-1 (zeros at position 0).
  std::vector<Vec> hidden_in(n, Vec(d, 0.0));
  std::vector<float> hidden_flat(n * d, 0.0f);
  for (int t = 1; t < n; ++t) {
    hidden_in[t] = ref_hidden[t - 1];
    for (int64_t i = 0; i < d; ++i) hidden_flat[t * d + i] = static_cast<float>(hidden_in[t][i]);
  }
  const std::vector<int32_t> table = Pages(40, 2);
  for (int head = 0; head < 3; ++head) {
    std::vector<Vec> mtp_logits, mtp_hidden;
    reference_->RunMtp(head, tokens, hidden_in, &mtp_logits, &mtp_hidden);
    BatchSequence seq{.tokens = tokens,
                      .full_table = table,
                      .swa_table = table,
                      .logit_rows = n,
                      .mtp_hidden = hidden_flat};
    ForwardOutput out;
    ASSERT_TRUE(model_->ForwardMtp(head, {&seq, 1}, *kv_, &out).ok());
    double worst = 0;
    for (int t = 0; t < n; ++t)
      worst = std::max(worst, RelErr(out.logits.data() + t * v, mtp_logits[t]));
    EXPECT_LT(worst, kLogitBound) << "head " << head;
  }
}

TEST_P(Step35ModelTest, BadInputsAreClearErrors) {
  const std::vector<int32_t> table = Pages(0, 1);
  const std::vector<int32_t> bad = {1, static_cast<int32_t>(model_->n_vocab())};
  BatchSequence seq{.tokens = bad, .full_table = table, .swa_table = table, .logit_rows = 1};
  ForwardOutput out;
  absl::Status status = model_->Forward({&seq, 1}, *kv_, &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(status.message().find("outside the vocabulary"), std::string::npos) << status;
  EXPECT_EQ(model_->ForwardMtp(3, {&seq, 1}, *kv_, &out).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(Step35ModelTest, HiddenRowsOnlyWhenAskedAndScratchIsReused) {
  const int64_t v = model_->n_vocab(), d = model_->hparams().n_embd;
  const std::vector<int32_t> tokens = RandomTokens(20, v, 7);
  const std::vector<int32_t> table = Pages(30, 2);
  BatchSequence seq{.tokens = std::span<const int32_t>(tokens).subspan(0, 12),
                    .full_table = table,
                    .swa_table = table,
                    .logit_rows = 1};
  ForwardOutput out;
  out.hidden.assign(3, 1.0f);  // stale rows from an earlier call must not survive
  ASSERT_TRUE(model_->Forward({&seq, 1}, *kv_, &out).ok());
  EXPECT_TRUE(out.hidden.empty());
  EXPECT_EQ(out.logits.size(), static_cast<size_t>(v));
  const uint64_t scratch = model_->backend().memory_info().buffer_bytes;
  for (int pos = 12; pos < 20; ++pos) {
    BatchSequence step{.tokens = std::span<const int32_t>(tokens).subspan(pos, 1),
                       .start_pos = pos,
                       .full_table = table,
                       .swa_table = table,
                       .logit_rows = 1};
    ASSERT_TRUE(model_->Forward({&step, 1}, *kv_, &out, {.want_hidden = pos % 2 == 0}).ok());
    EXPECT_EQ(out.hidden.size(), pos % 2 == 0 ? static_cast<size_t>(d) : 0u);
    EXPECT_EQ(model_->backend().memory_info().buffer_bytes, scratch)
        << "decode steps smaller than the prefill must reuse its activation buffers";
  }
}

// A compressed cache rounds every cached key and value and nothing else: fewer bytes, logits
// within a bound set by that rounding, the same greedy continuation. 30 prompt tokens fill past
// the sliding window (16), then 12 greedy decode steps read both pools. F16 rounds to 2^-11
// relative; Q8_0 to half a step of max|x| / 127 per 32 values.
void ExpectCloseToF32Cache(Step35Model& model, KvStorage& f32_kv, KvDtype dtype, uint64_t bytes_num,
                           uint64_t bytes_den, double bound) {
  absl::StatusOr<KvStorage> kv = KvStorage::Create(
      model.backend(), model.hparams(),
      {.dtype = dtype, .block_size = kBlockSize, .full_blocks = 64, .swa_blocks = 64});
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->bytes() * bytes_den, f32_kv.bytes() * bytes_num);
  EXPECT_EQ(kv->layer(0).dtype, dtype);
  const std::vector<int32_t> table = Pages(0, 4);
  const int64_t v = model.n_vocab();
  std::vector<int32_t> tokens = RandomTokens(30, v, 17);
  std::vector<int32_t> greedy32, greedy;
  double worst = 0;
  for (int pos = 0; pos < 42;) {
    const int count = pos == 0 ? 30 : 1;
    BatchSequence step{.tokens = std::span<const int32_t>(tokens).subspan(pos, count),
                       .start_pos = pos,
                       .full_table = table,
                       .swa_table = table,
                       .logit_rows = 1};
    ForwardOutput out32, out;
    ASSERT_TRUE(model.Forward({&step, 1}, f32_kv, &out32).ok());
    ASSERT_TRUE(model.Forward({&step, 1}, *kv, &out).ok());
    const Vec row(out32.logits.begin(), out32.logits.begin() + v);
    worst = std::max(worst, RelErr(out.logits.data(), row));
    greedy32.push_back(Argmax(out32.logits));
    greedy.push_back(Argmax(out.logits));
    tokens.push_back(greedy32.back());  // both caches continue from the F32 choice
    pos += count;
  }
  EXPECT_LT(worst, bound) << "logits with a " << KvDtypeName(dtype) << " cache vs F32";
  EXPECT_EQ(greedy, greedy32);
  std::printf("[ rel ] %s KV vs F32 KV logits, worst rel error %.3g\n",
              std::string(KvDtypeName(dtype)).c_str(), worst);
}

TEST_P(Step35ModelTest, F16KvCacheHalvesTheBytesAndKeepsTheGreedyContinuation) {
  ExpectCloseToF32Cache(*model_, *kv_, KvDtype::kF16, 1, 2, 3e-3);
}

// Head dim 32: one Q8_0 block (34 bytes) per 128 bytes of F32.
TEST_P(Step35ModelTest, Q8KvCacheKeepsTheGreedyContinuation) {
  ExpectCloseToF32Cache(*model_, *kv_, KvDtype::kQ8_0, 34, 128, 3e-2);
}

TEST_P(Step35ModelTest, KvStorageThatCannotFitNamesTheBytes) {
  // 2^20 blocks of 2^20 positions: far beyond any address space.
  absl::StatusOr<KvStorage> kv =
      KvStorage::Create(model_->backend(), model_->hparams(),
                        {.block_size = 1 << 20, .full_blocks = 1 << 20, .swa_blocks = 1 << 20});
  ASSERT_EQ(kv.status().code(), absl::StatusCode::kResourceExhausted) << kv.status();
  EXPECT_NE(kv.status().message().find("bytes wanted"), std::string::npos) << kv.status();
  EXPECT_NE(kv.status().message().find("free of"), std::string::npos) << kv.status();
}

// The CPU backend's results must not depend on how many threads it runs (the CPU is the
// reference of every GPU comparison, and serving hosts differ in core count): a 17-token prefill
// (all logit rows) and 8 teacher-forced decode steps, bit for bit, with 1, 2, 3, 7 and 16 threads
// (16: the H200 host's core count, where the CUDA tests' CPU side runs).
TEST_P(Step35ModelTest, ResultsDoNotDependOnTheThreadCount) {
  const std::string path = TinyPath(GetParam());  // written by SetUp, mapped by model_
  const std::vector<int32_t> tokens = RandomTokens(25, model_->n_vocab(), 3);
  auto run = [&](int threads) {
    std::vector<float> logits;
    absl::StatusOr<std::unique_ptr<Step35Model>> model =
        Step35Model::Load(path, {.num_threads = threads});
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return logits;
    absl::StatusOr<KvStorage> kv =
        KvStorage::Create((*model)->backend(), (*model)->hparams(),
                          {.block_size = kBlockSize, .full_blocks = 4, .swa_blocks = 4});
    EXPECT_TRUE(kv.ok()) << kv.status();
    if (!kv.ok()) return logits;
    const std::vector<int32_t> table = Pages(0, 2);
    int pos = 0;
    while (pos < 25) {
      const int count = pos == 0 ? 17 : 1;
      BatchSequence step{.tokens = std::span<const int32_t>(tokens).subspan(pos, count),
                         .start_pos = pos,
                         .full_table = table,
                         .swa_table = table,
                         .logit_rows = count};
      ForwardOutput out;
      EXPECT_TRUE((*model)->Forward({&step, 1}, *kv, &out).ok());
      logits.insert(logits.end(), out.logits.begin(), out.logits.end());
      pos += count;
    }
    return logits;
  };
  const std::vector<float> one = run(1);
  ASSERT_EQ(one.size(), static_cast<size_t>(25 * model_->n_vocab()));
  for (int threads : {2, 3, 7, 16}) {
    const std::vector<float> many = run(threads);
    ASSERT_EQ(many.size(), one.size()) << threads << " threads";
    size_t first = 0;
    while (first < one.size() && std::memcmp(&one[first], &many[first], sizeof(float)) == 0) {
      ++first;
    }
    EXPECT_EQ(first, one.size()) << threads << " threads: logit " << first % model_->n_vocab()
                                 << " of row " << first / model_->n_vocab() << " is " << many[first]
                                 << ", with one thread " << one[first];
  }
}

TEST(Step35ModelLoadTest, ReportsPlacementProgressUpToTheBoundBytes) {
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  uint64_t bound_bytes = 0;
  absl::StatusOr<std::unique_ptr<Step35Model>> model = Step35Model::Load(
      MakeTiny("mix"), {.num_threads = 1,
                        .load_mtp = false,
                        .progress = [&](uint64_t done, uint64_t total, std::string_view name) {
                          EXPECT_FALSE(name.empty());
                          calls.emplace_back(done, total);
                        }});
  ASSERT_TRUE(model.ok()) << model.status();
  for (Tensor t : (*model)->weights().bound_tensors) bound_bytes += t->nbytes;
  ASSERT_EQ(calls.size(), (*model)->weights().bound_tensors.size());
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i].first, calls[i - 1].first);
  EXPECT_EQ(calls.back().first, bound_bytes);
  EXPECT_EQ(calls.back().second, bound_bytes);
  EXPECT_EQ((*model)->backend().name(), "cpu");
}

TEST(Step35ModelLoadTest, UnknownBackendListsTheKnownOnes) {
  absl::StatusOr<std::unique_ptr<Step35Model>> model =
      Step35Model::Load(MakeTiny("f32"), {.backend = "tpu"});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("cpu"), std::string::npos) << model.status();
}

INSTANTIATE_TEST_SUITE_P(Recipes, Step35ModelTest, ::testing::Values("f32", "mix"));

}  // namespace
}  // namespace stepserve::model
