// MTP speculative decoding on the tiny synthetic step35 model (f32 weights, fixed seed): the
// spec's main invariant (speculation never changes the tokens, greedy or seeded sampling), drafts
// against a hand evaluation of spec 5.5 with ForwardMtp, combined vs separate draft files,
// rollback of target and head KV, single-head recurrent mode on a 1-head file.
#include "engine/spec/mtp_speculator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <numeric>
#include <random>

#include "engine/base/check.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/sequence_blocks.h"
#include "engine/sampling/logits_ops.h"
#include "engine/sampling/speculative.h"
#include "engine/synth/fill.h"
#include "engine/synth/make_model.h"
#include "engine/synth/metadata.h"

namespace stepserve::spec {
namespace {

using model::BatchSequence;
using model::ForwardOutput;
using model::KvStorage;
using model::Step35Model;

constexpr uint64_t kSeed = 7;
constexpr int32_t kBlockSize = 16;
constexpr int32_t kBlocks = 16;  // 256 positions per sequence

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("stepserve_spec_test_" + std::to_string(getpid()) + "_" + name + ".gguf"))
      .string();
}

synth::MakeModelOptions TinyOptions(const std::string& path) {
  synth::MakeModelOptions options;
  options.preset = "tiny";
  options.out = path;
  options.seed = kSeed;
  options.recipe = "f32";
  options.threads = 2;
  return options;
}

// The tiny config cut to one MTP head (spec 5.1 variant A1, a "pruned" GGUF). Tensor contents
// are seeded by name, so head 0 and the trunk equal those of the 3-head files.
absl::Status WriteOneHeadModel(const std::string& path) {
  const synth::MakeModelOptions options = TinyOptions(path);
  absl::StatusOr<synth::ResolvedModel> m = synth::ResolveModel(options);
  if (!m.ok()) return m.status();
  synth::Step35Config& c = m->config;
  const size_t n = static_cast<size_t>(c.n_layer + 1);
  c.n_mtp = 1;
  c.head_count.resize(n);
  c.head_count_kv.resize(n);
  c.is_swa.resize(n);
  c.is_moe.resize(n);
  c.clamp_exp.resize(n);
  c.clamp_shexp.resize(n);
  absl::StatusOr<synth::ModelPlan> plan =
      synth::BuildPlan(c, m->recipe, synth::FilePart::kCombined);
  if (!plan.ok()) return plan.status();
  gguf::GgufWriter writer;
  synth::AddModelMetadata(*plan, &writer.metadata());
  synth::AddTokenizerMetadata(m->vocab, &writer.metadata());
  const synth::ModelPlan* p = &*plan;
  for (const synth::TensorSpec& spec : p->tensors) {
    const synth::TensorSpec* s = &spec;
    absl::Status st =
        writer.AddTensor(spec.name, spec.type, spec.ne, [s, p](uint8_t* dst, uint64_t nbytes) {
          return synth::FillTensor(*s, p->rope_freqs, kSeed, 2, dst, nbytes);
        });
    if (!st.ok()) return st;
  }
  return writer.Write(path, {}).status();
}

std::unique_ptr<Step35Model> LoadOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Step35Model>> model = Step35Model::Load(path, {.num_threads = 2});
  EXPECT_TRUE(model.ok()) << path << ": " << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

std::vector<int32_t> Pages(int32_t first, int32_t count) {
  std::vector<int32_t> table(count);
  std::iota(table.begin(), table.end(), first);
  return table;
}

std::vector<int32_t> RandomTokens(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % vocab);
  return tokens;
}

class MtpSpeculatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    combined_path_ = new std::string(TempPath("combined"));
    trunk_path_ = new std::string(TempPath("trunk"));
    one_head_path_ = new std::string(TempPath("onehead"));
    other_vocab_path_ = new std::string(TempPath("othervocab"));
    ASSERT_TRUE(synth::MakeModel(TinyOptions(*combined_path_), nullptr).ok());
    synth::MakeModelOptions separate = TinyOptions(*trunk_path_);
    separate.mtp = synth::MtpLayout::kSeparate;
    ASSERT_TRUE(synth::MakeModel(separate, nullptr).ok());
    absl::Status st = WriteOneHeadModel(*one_head_path_);
    ASSERT_TRUE(st.ok()) << st;
    synth::MakeModelOptions other = TinyOptions(*other_vocab_path_);
    other.mtp = synth::MtpLayout::kSeparate;
    other.bpe_merges = 1000;  // a different vocabulary size
    ASSERT_TRUE(synth::MakeModel(other, nullptr).ok());
    combined_ = LoadOrDie(*combined_path_).release();
  }
  static void TearDownTestSuite() {
    delete combined_;
    for (std::string* p : {combined_path_, trunk_path_, one_head_path_, other_vocab_path_}) {
      std::filesystem::remove(*p);
      std::filesystem::remove(synth::MtpCompanionPath(*p));
      delete p;
    }
  }

  static KvStorage NewKv(const Step35Model& m) {
    absl::StatusOr<KvStorage> kv = KvStorage::Create(
        m.backend(), m.hparams(),
        {.block_size = kBlockSize, .full_blocks = 2 * kBlocks, .swa_blocks = 2 * kBlocks});
    STEPSERVE_CHECK(kv.ok());
    return *std::move(kv);
  }

  // Plain decoding, written independently of the speculative loop: prefill, then one target
  // forward per token, each token drawn by the Sampler.
  static std::vector<int32_t> PlainDecode(Step35Model& m, std::span<const int32_t> prompt,
                                          const SamplingParams& params, int n) {
    KvStorage kv = NewKv(m);
    const std::vector<int32_t> table = Pages(0, kBlocks);
    absl::StatusOr<Sampler> sampler =
        Sampler::Create(params, static_cast<int>(m.n_vocab()), prompt);
    EXPECT_TRUE(sampler.ok());
    std::vector<int32_t> out;
    std::vector<int32_t> rows(prompt.begin(), prompt.end());
    int64_t pos = 0;
    while (static_cast<int>(out.size()) < n) {
      BatchSequence seq{.tokens = rows,
                        .start_pos = pos,
                        .full_table = table,
                        .swa_table = table,
                        .logit_rows = 1};
      ForwardOutput fwd;
      EXPECT_TRUE(m.Forward({&seq, 1}, kv, &fwd).ok());
      pos += static_cast<int64_t>(rows.size());
      absl::StatusOr<SampleResult> r = sampler->Sample(fwd.logits);
      EXPECT_TRUE(r.ok());
      out.push_back(r->token);
      rows.assign(1, r->token);
    }
    return out;
  }

  static std::vector<int32_t> Tokens(const GenerationResult& r) {
    std::vector<int32_t> t;
    for (const SampleResult& s : r.tokens) t.push_back(s.token);
    return t;
  }

  // Target prefill of `prompt` into `kv` (pages 0..): every row's hidden, last row's argmax.
  static void Prefill(Step35Model& m, KvStorage& kv, std::span<const int32_t> prompt,
                      std::span<const int32_t> table, std::vector<float>* hidden, int32_t* next,
                      std::span<const int32_t> swa_table = {}) {
    BatchSequence seq{.tokens = prompt,
                      .full_table = table,
                      .swa_table = swa_table.empty() ? table : swa_table,
                      .logit_rows = 1};
    ForwardOutput fwd;
    ASSERT_TRUE(m.Forward({&seq, 1}, kv, &fwd, {.want_hidden = true}).ok());
    *hidden = fwd.hidden;
    *next = Argmax(fwd.logits);
  }

  static std::string* combined_path_;
  static std::string* trunk_path_;
  static std::string* one_head_path_;
  static std::string* other_vocab_path_;
  static Step35Model* combined_;
};

std::string* MtpSpeculatorTest::combined_path_ = nullptr;
std::string* MtpSpeculatorTest::trunk_path_ = nullptr;
std::string* MtpSpeculatorTest::one_head_path_ = nullptr;
std::string* MtpSpeculatorTest::other_vocab_path_ = nullptr;
Step35Model* MtpSpeculatorTest::combined_ = nullptr;

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

// (a) The spec's main invariant: greedy speculative decoding emits exactly the plain greedy
// tokens, whatever k.
TEST_F(MtpSpeculatorTest, GreedySpeculationEqualsPlainGreedyForK123) {
  const std::vector<int32_t> prompt = RandomTokens(20, combined_->n_vocab(), 1);
  const std::vector<int32_t> plain = PlainDecode(*combined_, prompt, Greedy(), 64);
  for (int k = 1; k <= 3; ++k) {
    SpeculativeOptions options;
    options.drafter.n_max = k;
    absl::StatusOr<std::unique_ptr<SpeculativeGenerator>> gen =
        SpeculativeGenerator::Create(combined_, nullptr, options);
    ASSERT_TRUE(gen.ok()) << gen.status();
    absl::StatusOr<GenerationResult> r = (*gen)->Generate(prompt, Greedy(), 64);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Tokens(*r), plain) << "k = " << k;
    const SpecStats& s = r->stats;
    EXPECT_EQ(s.emitted_tokens, 64);
    EXPECT_GT(s.draft_steps, 0);
    EXPECT_LE(s.accepted_tokens, s.draft_tokens);
    EXPECT_LE(s.draft_tokens, s.draft_steps * k);
    // Every target forward after the prefill emits 1 + accepted tokens.
    EXPECT_EQ(s.emitted_tokens, 1 + (s.target_forwards - 1) + s.accepted_tokens);
    ASSERT_EQ(s.drafted_at.size(), static_cast<size_t>(k));
    EXPECT_EQ(s.drafted_at[0], s.draft_steps);
    RecordProperty("stats_k" + std::to_string(k), s.ToJson());
    std::printf("k=%d %s\n", k, s.ToJson().c_str());
  }
}

// Oracle drafts (the plain run's own continuation) are all accepted, greedy and seeded-sampled,
// so the multi-row accept / catch-up path runs on every step; drafts with every second token
// corrupted give partial acceptance and still the plain tokens (spec 6.8 items 2 and 3).
TEST_F(MtpSpeculatorTest, OracleAndCorruptedDraftsKeepThePlainTokens) {
  const std::vector<int32_t> prompt = RandomTokens(16, combined_->n_vocab(), 10);
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  SamplingParams sampled;
  sampled.temperature = 0.9f;
  sampled.top_p = 0.9f;
  sampled.seed = 77;
  for (const SamplingParams& params : {Greedy(), sampled}) {
    const std::vector<int32_t> plain = PlainDecode(*combined_, prompt, params, 48);
    for (const bool corrupt : {false, true}) {
      SpeculativeOptions options;
      options.draft_override = [&](int64_t n_past, int32_t id_last, int k_cap) {
        const int64_t i = n_past - n_prompt;  // id_last is generated token i
        EXPECT_EQ(id_last, plain[i]);
        std::vector<int32_t> d;
        for (int j = 1; j <= k_cap && i + j < static_cast<int64_t>(plain.size()); ++j) {
          const bool bad = corrupt && (n_past + j) % 2 == 0;
          d.push_back(bad ? (plain[i + j] + 1) % static_cast<int32_t>(combined_->n_vocab())
                          : plain[i + j]);
        }
        return d;
      };
      auto gen = SpeculativeGenerator::Create(combined_, nullptr, options);
      ASSERT_TRUE(gen.ok());
      absl::StatusOr<GenerationResult> r = (*gen)->Generate(prompt, params, 48);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(Tokens(*r), plain) << "corrupt " << corrupt << " greedy " << params.IsGreedy();
      const SpecStats& st = r->stats;
      if (!corrupt) {
        EXPECT_EQ(st.accepted_tokens, st.draft_tokens);
        EXPECT_EQ(st.target_forwards, 1 + (47 + 3) / 4);  // 4 tokens per verification
      } else {
        EXPECT_GT(st.accepted_tokens, 0);
        EXPECT_LT(st.accepted_tokens, st.draft_tokens);
      }
    }
  }
}

// (b) Chain-mode drafts equal ForwardMtp evaluated by hand per spec 5.4/5.5 on fresh caches, and
// a ragged two-sequence Draft call gives each sequence its own drafts.
TEST_F(MtpSpeculatorTest, ChainDraftsEqualHandEvaluation) {
  Step35Model& m = *combined_;
  const int64_t d = m.hparams().n_embd, v = m.n_vocab();
  const std::vector<int32_t> prompt_a = RandomTokens(21, v, 2), prompt_b = RandomTokens(9, v, 3);
  const std::vector<int32_t> table_a = Pages(0, kBlocks), table_b = Pages(kBlocks, kBlocks);

  // Hand evaluation for prompt_a on its own caches.
  std::vector<int32_t> hand;
  {
    KvStorage kv = NewKv(m);
    std::vector<float> h;
    int32_t id_last = 0;
    Prefill(m, kv, prompt_a, table_a, &h, &id_last);
    const int64_t n = static_cast<int64_t>(prompt_a.size());
    std::vector<float> shifted(n * d, 0.0f);  // row t: h of row t - 1, zeros at position 0
    std::copy(h.begin(), h.end() - d, shifted.begin() + d);
    for (int head = 0; head < 3; ++head) {
      BatchSequence seq{
          .tokens = prompt_a, .full_table = table_a, .swa_table = table_a, .mtp_hidden = shifted};
      ForwardOutput out;
      ASSERT_TRUE(m.ForwardMtp(head, {&seq, 1}, kv, &out).ok());
    }
    const std::vector<float> pending(h.end() - d, h.end());
    std::vector<int32_t> toks{id_last};
    std::vector<float> hid = pending;
    for (int head = 0; head < 3; ++head) {
      BatchSequence seq{.tokens = toks,
                        .start_pos = n,
                        .full_table = table_a,
                        .swa_table = table_a,
                        .logit_rows = 1,
                        .mtp_hidden = hid};
      ForwardOutput out;
      ASSERT_TRUE(m.ForwardMtp(head, {&seq, 1}, kv, &out).ok());
      const int32_t draft = Argmax(out.logits);
      hand.push_back(draft);
      toks.push_back(draft);
      hid.insert(hid.end(), out.hidden.end() - d, out.hidden.end());
    }
  }

  // The drafter over a batch of both sequences.
  KvStorage kv = NewKv(m);
  absl::StatusOr<std::unique_ptr<MtpDrafter>> drafter = MtpDrafter::Create(m, nullptr, {});
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  EXPECT_EQ((*drafter)->mode(), MtpMode::kChain);
  EXPECT_EQ((*drafter)->max_draft(), 3);
  std::vector<float> h_a, h_b;
  int32_t last_a = 0, last_b = 0;
  Prefill(m, kv, prompt_a, table_a, &h_a, &last_a);
  Prefill(m, kv, prompt_b, table_b, &h_b, &last_b);
  MtpSequenceState sa, sb;
  sa.Reset(d);
  sb.Reset(d);
  const CatchUpItem catch_up[] = {{&sa, prompt_a, h_a, table_a, table_a},
                                  {&sb, prompt_b, h_b, table_b, table_b}};
  ASSERT_TRUE((*drafter)->CatchUp(catch_up, kv).ok());
  EXPECT_EQ(sa.n_cached, 21);
  EXPECT_EQ(sb.n_cached, 9);
  const DraftItem items[] = {{&sa, last_a, 3, table_a, table_a},
                             {&sb, last_b, 2, table_b, table_b}};
  std::vector<DraftTokens> drafts;
  ASSERT_TRUE((*drafter)->Draft(items, kv, &drafts).ok());
  ASSERT_EQ(drafts.size(), 2u);
  EXPECT_EQ(drafts[0].tokens, hand);
  ASSERT_EQ(drafts[1].tokens.size(), 2u);  // its own cap

  // Sequence b alone on fresh caches gives the same two drafts as inside the batch.
  KvStorage kv2 = NewKv(m);
  Prefill(m, kv2, prompt_b, table_b, &h_b, &last_b);
  MtpSequenceState solo;
  solo.Reset(d);
  const CatchUpItem solo_catch{&solo, prompt_b, h_b, table_b, table_b};
  ASSERT_TRUE((*drafter)->CatchUp({&solo_catch, 1}, kv2).ok());
  const DraftItem solo_item{&solo, last_b, 2, table_b, table_b};
  std::vector<DraftTokens> solo_drafts;
  ASSERT_TRUE((*drafter)->Draft({&solo_item, 1}, kv2, &solo_drafts).ok());
  EXPECT_EQ(solo_drafts[0].tokens, drafts[1].tokens);
  for (float p : drafts[0].top_prob) {
    EXPECT_GT(p, 0.0f);
    EXPECT_LE(p, 1.0f);
  }
}

// (c) Combined file vs trunk-only target + MTP-only draft file of the same seed: same drafts and
// the same speculative run; a draft with another vocabulary is refused with a clear error.
TEST_F(MtpSpeculatorTest, SeparateDraftFileDraftsLikeCombined) {
  std::unique_ptr<Step35Model> trunk = LoadOrDie(*trunk_path_);
  std::unique_ptr<Step35Model> mtp = LoadOrDie(synth::MtpCompanionPath(*trunk_path_));
  ASSERT_TRUE(trunk && mtp);
  EXPECT_EQ(trunk->num_mtp_heads(), 0);
  EXPECT_FALSE(mtp->weights().has_trunk);
  ASSERT_EQ(mtp->num_mtp_heads(), 3);

  const std::vector<int32_t> prompt = RandomTokens(17, combined_->n_vocab(), 4);
  const std::vector<int32_t> table = Pages(0, kBlocks);
  const int64_t d = combined_->hparams().n_embd;
  auto drafts_of = [&](Step35Model& target, Step35Model* draft) {
    KvStorage target_kv = NewKv(target);
    std::optional<KvStorage> draft_kv;
    if (draft != nullptr) {
      absl::StatusOr<KvStorage> kv = KvStorage::Create(
          draft->backend(), draft->hparams(),
          MtpDrafter::DraftKvOptions(draft->hparams(), kBlockSize, 2 * kBlocks, 2 * kBlocks));
      EXPECT_TRUE(kv.ok()) << kv.status();
      draft_kv.emplace(*std::move(kv));
    }
    KvStorage& heads_kv = draft_kv ? *draft_kv : target_kv;
    absl::StatusOr<std::unique_ptr<MtpDrafter>> drafter = MtpDrafter::Create(target, draft, {});
    EXPECT_TRUE(drafter.ok()) << drafter.status();
    std::vector<float> h;
    int32_t id_last = 0;
    Prefill(target, target_kv, prompt, table, &h, &id_last);
    MtpSequenceState state;
    state.Reset(d);
    const CatchUpItem c{&state, prompt, h, table, table};
    EXPECT_TRUE((*drafter)->CatchUp({&c, 1}, heads_kv).ok());
    const DraftItem item{&state, id_last, 3, table, table};
    std::vector<DraftTokens> out;
    EXPECT_TRUE((*drafter)->Draft({&item, 1}, heads_kv, &out).ok());
    return out[0];
  };
  const DraftTokens a = drafts_of(*combined_, nullptr);
  const DraftTokens b = drafts_of(*trunk, mtp.get());
  ASSERT_EQ(a.tokens.size(), 3u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.top_prob, b.top_prob);

  auto gen_a = SpeculativeGenerator::Create(combined_, nullptr, {});
  auto gen_b = SpeculativeGenerator::Create(trunk.get(), mtp.get(), {});
  ASSERT_TRUE(gen_a.ok() && gen_b.ok());
  auto ra = (*gen_a)->Generate(prompt, Greedy(), 32);
  auto rb = (*gen_b)->Generate(prompt, Greedy(), 32);
  ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
  EXPECT_EQ(Tokens(*ra), Tokens(*rb));
  EXPECT_EQ(ra->stats.accepted_at, rb->stats.accepted_at);

  // Errors: the trunk-only file has no heads; a draft from another vocabulary; an MTP-only target.
  absl::StatusOr<std::unique_ptr<MtpDrafter>> none = MtpDrafter::Create(*trunk, nullptr, {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  std::unique_ptr<Step35Model> other = LoadOrDie(synth::MtpCompanionPath(*other_vocab_path_));
  ASSERT_TRUE(other);
  absl::StatusOr<std::unique_ptr<MtpDrafter>> bad = MtpDrafter::Create(*trunk, other.get(), {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("n_vocab"), std::string::npos) << bad.status();
  EXPECT_FALSE(SpeculativeGenerator::Create(mtp.get(), nullptr, {}).ok());
}

// (d) Rollback: after a verification with rejected drafts, the target KV is cut back to the
// accepted prefix and a plain decode continues exactly like a recompute of the committed
// sequence; the heads, caught up over all verification rows and rolled back (5.6.4-5), draft
// like heads that only ever saw the committed sequence.
TEST_F(MtpSpeculatorTest, RollbackEqualsRecompute) {
  Step35Model& m = *combined_;
  const int64_t d = m.hparams().n_embd, v = m.n_vocab();
  const std::vector<int32_t> prompt = RandomTokens(30, v, 5);
  KvStorage kv = NewKv(m);
  kv::BlockPool full(kBlocks), swa(kBlocks);
  kv::SequenceBlocks blocks(
      {.block_size = kBlockSize, .sliding_window = m.hparams().sliding_window, .rollback_slack = 4},
      &full, &swa);
  ASSERT_TRUE(blocks.Grow(30));
  std::vector<float> h;
  int32_t id_last = 0;
  Prefill(m, kv, prompt, blocks.full_table(), &h, &id_last, blocks.swa_table());
  absl::StatusOr<std::unique_ptr<MtpDrafter>> drafter = MtpDrafter::Create(m, nullptr, {});
  ASSERT_TRUE(drafter.ok());
  MtpSequenceState state;
  state.Reset(d);
  CatchUpItem c{&state, prompt, h, blocks.full_table(), blocks.swa_table()};
  ASSERT_TRUE((*drafter)->CatchUp({&c, 1}, kv).ok());

  // Verify [id_last, d1, d2, d3] where d1 is the target's own choice and d2, d3 are wrong.
  ASSERT_TRUE(blocks.Grow(34));
  std::vector<int32_t> rows{id_last, 0, 0, 0};
  {
    KvStorage scratch = NewKv(m);  // the target's own next token, computed apart from kv
    std::vector<float> hs;
    std::vector<int32_t> seq(prompt);
    seq.push_back(id_last);
    Prefill(m, scratch, seq, Pages(0, kBlocks), &hs, &rows[1]);
  }
  rows[2] = (rows[1] + 1) % v;
  rows[3] = (rows[1] + 2) % v;
  BatchSequence verify{.tokens = rows,
                       .start_pos = 30,
                       .full_table = blocks.full_table(),
                       .swa_table = blocks.swa_table(),
                       .logit_rows = 4};
  ForwardOutput fwd;
  ASSERT_TRUE(m.Forward({&verify, 1}, kv, &fwd, {.want_hidden = true}).ok());
  absl::StatusOr<VerifyOutcome> outcome =
      VerifyGreedy(fwd.logits, static_cast<int>(v), {rows.data() + 1, 3});
  ASSERT_TRUE(outcome.ok());
  ASSERT_EQ(outcome->accepted, 1) << "d2 was made wrong on purpose";
  // Heads: process over all four rows (5.6.2), then roll back to 30 + a + 1 (5.6.4-5).
  c = {&state, rows, fwd.hidden, blocks.full_table(), blocks.swa_table()};
  ASSERT_TRUE((*drafter)->CatchUp({&c, 1}, kv).ok());
  ASSERT_TRUE(MtpDrafter::Rollback(state, 32).ok());
  EXPECT_FALSE(MtpDrafter::Rollback(state, 40).ok());
  blocks.Truncate(32);
  EXPECT_EQ(blocks.length(), 32);

  // Continue: plain decode of 5 tokens from the rolled-back cache.
  std::vector<int32_t> committed(prompt);
  committed.insert(committed.end(), {rows[0], rows[1]});
  int32_t next = outcome->token;
  std::vector<float> cont_logits;
  std::vector<int32_t> cont;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(blocks.Grow(32 + i + 1));
    BatchSequence step{.tokens = {&next, 1},
                       .start_pos = 32 + i,
                       .full_table = blocks.full_table(),
                       .swa_table = blocks.swa_table(),
                       .logit_rows = 1};
    ASSERT_TRUE(m.Forward({&step, 1}, kv, &fwd).ok());
    cont.push_back(next);
    cont_logits.insert(cont_logits.end(), fwd.logits.begin(), fwd.logits.end());
    next = Argmax(fwd.logits);
  }
  // Recompute: the committed sequence plus the continuation in one forward on fresh caches.
  std::vector<int32_t> all(committed);
  all.insert(all.end(), cont.begin(), cont.end());
  KvStorage fresh = NewKv(m);
  const std::vector<int32_t> table = Pages(0, kBlocks);
  BatchSequence full_seq{.tokens = all, .full_table = table, .swa_table = table, .logit_rows = 5};
  ForwardOutput ref;
  ASSERT_TRUE(m.Forward({&full_seq, 1}, fresh, &ref).ok());
  double worst = 0;
  for (size_t i = 0; i < cont_logits.size(); ++i) {
    worst = std::max<double>(worst, std::abs(cont_logits[i] - ref.logits[i]));
  }
  EXPECT_LT(worst, 1e-4) << "rolled-back decode vs recompute, max abs logit difference";
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Argmax(std::span<const float>(cont_logits).subspan(i * v, v)),
              Argmax(std::span<const float>(ref.logits).subspan(i * v, v)));
  }

  // Heads after rollback draft like heads caught up on the committed sequence only.
  const DraftItem item{&state, outcome->token, 3, blocks.full_table(), blocks.swa_table()};
  // (positions 32.. of the trunk were rewritten by the continuation; the heads only read their
  // own layers, which rollback left at the committed prefix)
  std::vector<DraftTokens> rolled;
  ASSERT_TRUE((*drafter)->Draft({&item, 1}, kv, &rolled).ok());
  KvStorage kv2 = NewKv(m);
  std::vector<float> h2;
  int32_t unused;
  Prefill(m, kv2, committed, table, &h2, &unused);
  MtpSequenceState clean;
  clean.Reset(d);
  const CatchUpItem c2{&clean, committed, h2, table, table};
  ASSERT_TRUE((*drafter)->CatchUp({&c2, 1}, kv2).ok());
  const DraftItem item2{&clean, outcome->token, 3, table, table};
  std::vector<DraftTokens> direct;
  ASSERT_TRUE((*drafter)->Draft({&item2, 1}, kv2, &direct).ok());
  EXPECT_EQ(rolled[0].tokens, direct[0].tokens);
  ASSERT_EQ(rolled[0].top_prob.size(), direct[0].top_prob.size());
  for (size_t j = 0; j < direct[0].top_prob.size(); ++j) {
    EXPECT_NEAR(rolled[0].top_prob[j], direct[0].top_prob[j], 1e-4);
  }
}

// (e) Seeded sampling with the full chain: speculation emits exactly the tokens plain sampling
// with the same seed emits (exact-match acceptance, VerifyWithSampler).
TEST_F(MtpSpeculatorTest, SeededSampledSpeculationEqualsPlainSampling) {
  SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 40;
  params.top_p = 0.95f;
  params.repetition_penalty = 1.1f;
  params.seed = 1234;
  const std::vector<int32_t> prompt = RandomTokens(12, combined_->n_vocab(), 6);
  const std::vector<int32_t> plain = PlainDecode(*combined_, prompt, params, 64);
  auto gen = SpeculativeGenerator::Create(combined_, nullptr, {});
  ASSERT_TRUE(gen.ok());
  absl::StatusOr<GenerationResult> r = (*gen)->Generate(prompt, params, 64);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Tokens(*r), plain);
  EXPECT_GT(r->stats.draft_tokens, 0);
  std::printf("sampled %s\n", r->stats.ToJson().c_str());
}

// (f) Single-head recurrent mode (spec 5.1 A1 / 5.5) on a file pruned to one MTP head: greedy
// invariant, drafts equal the 3-head file forced to recurrent mode (same head 0 weights), and the
// first draft equals chain mode's first draft.
TEST_F(MtpSpeculatorTest, SingleHeadRecurrentMode) {
  std::unique_ptr<Step35Model> one = LoadOrDie(*one_head_path_);
  ASSERT_TRUE(one);
  ASSERT_EQ(one->num_mtp_heads(), 1);
  const int64_t d = one->hparams().n_embd;
  const std::vector<int32_t> prompt = RandomTokens(25, one->n_vocab(), 8);

  absl::StatusOr<std::unique_ptr<MtpDrafter>> rec = MtpDrafter::Create(*one, nullptr, {});
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ((*rec)->mode(), MtpMode::kRecurrent);
  EXPECT_EQ((*rec)->max_draft(), 3);  // not clamped to the head count
  auto forced = MtpDrafter::Create(*combined_, nullptr, {.mode = MtpMode::kRecurrent});
  auto chain = MtpDrafter::Create(*combined_, nullptr, {});
  ASSERT_TRUE(forced.ok() && chain.ok());
  auto draft_with = [&](Step35Model& m, MtpDrafter& drafter) {
    KvStorage kv = NewKv(m);
    const std::vector<int32_t> table = Pages(0, kBlocks);
    std::vector<float> h;
    int32_t id_last = 0;
    Prefill(m, kv, prompt, table, &h, &id_last);
    MtpSequenceState s;
    s.Reset(d);
    const CatchUpItem c{&s, prompt, h, table, table};
    EXPECT_TRUE(drafter.CatchUp({&c, 1}, kv).ok());
    const DraftItem item{&s, id_last, 3, table, table};
    std::vector<DraftTokens> out;
    EXPECT_TRUE(drafter.Draft({&item, 1}, kv, &out).ok());
    return out[0].tokens;
  };
  const std::vector<int32_t> r1 = draft_with(*one, **rec);
  const std::vector<int32_t> r3 = draft_with(*combined_, **forced);
  const std::vector<int32_t> ch = draft_with(*combined_, **chain);
  ASSERT_EQ(r1.size(), 3u);
  EXPECT_EQ(r1, r3);
  EXPECT_EQ(r1[0], ch[0]);

  const std::vector<int32_t> plain = PlainDecode(*one, prompt, Greedy(), 64);
  auto gen = SpeculativeGenerator::Create(one.get(), nullptr, {});
  ASSERT_TRUE(gen.ok());
  absl::StatusOr<GenerationResult> r = (*gen)->Generate(prompt, Greedy(), 64);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Tokens(*r), plain);
  std::printf("recurrent %s\n", r->stats.ToJson().c_str());
}

// p_min keeps the longest prefix of drafts whose top-10 probability reaches it; n_min drops
// shorter drafts; stop tokens end the generation inside an accepted run.
TEST_F(MtpSpeculatorTest, PMinNMinAndStopTokens) {
  Step35Model& m = *combined_;
  const int64_t d = m.hparams().n_embd;
  const std::vector<int32_t> prompt = RandomTokens(14, m.n_vocab(), 9);
  auto draft_with = [&](const MtpDrafterOptions& options) {
    auto drafter = MtpDrafter::Create(m, nullptr, options);
    EXPECT_TRUE(drafter.ok()) << drafter.status();
    KvStorage kv = NewKv(m);
    const std::vector<int32_t> table = Pages(0, kBlocks);
    std::vector<float> h;
    int32_t id_last = 0;
    Prefill(m, kv, prompt, table, &h, &id_last);
    MtpSequenceState s;
    s.Reset(d);
    const CatchUpItem c{&s, prompt, h, table, table};
    EXPECT_TRUE((*drafter)->CatchUp({&c, 1}, kv).ok());
    const DraftItem item{&s, id_last, 3, table, table};
    std::vector<DraftTokens> out;
    EXPECT_TRUE((*drafter)->Draft({&item, 1}, kv, &out).ok());
    return out[0];
  };
  const DraftTokens all = draft_with({});
  ASSERT_EQ(all.tokens.size(), 3u);
  for (int cut = 0; cut < 3; ++cut) {
    // A threshold just above draft `cut`'s probability, and at or below every earlier one's.
    float p_min = std::nextafter(all.top_prob[cut], 2.0f);
    bool earlier_ok = true;
    for (int j = 0; j < cut; ++j) earlier_ok &= all.top_prob[j] >= p_min;
    if (!earlier_ok) continue;
    const DraftTokens cut_draft = draft_with({.p_min = p_min});
    EXPECT_EQ(cut_draft.tokens, std::vector<int32_t>(all.tokens.begin(), all.tokens.begin() + cut));
    if (cut > 0) {
      EXPECT_TRUE(draft_with({.n_min = cut + 1, .p_min = p_min}).tokens.empty());
    }
  }
  EXPECT_FALSE(MtpDrafter::Create(m, nullptr, {.n_max = 1, .n_min = 2}).ok());
  EXPECT_FALSE(MtpDrafter::Create(m, nullptr, {.p_min = 1.5f}).ok());

  // Stop token: the plain greedy run's 10th token ends the run at that token.
  const std::vector<int32_t> plain = PlainDecode(m, prompt, Greedy(), 20);
  SpeculativeOptions options;
  options.stop_tokens = {plain[9]};
  auto gen = SpeculativeGenerator::Create(&m, nullptr, options);
  ASSERT_TRUE(gen.ok());
  absl::StatusOr<GenerationResult> r = (*gen)->Generate(prompt, Greedy(), 20);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped);
  const size_t first = std::find(plain.begin(), plain.end(), plain[9]) - plain.begin();
  EXPECT_EQ(Tokens(*r), std::vector<int32_t>(plain.begin(), plain.begin() + first + 1));
}

}  // namespace
}  // namespace stepserve::spec
