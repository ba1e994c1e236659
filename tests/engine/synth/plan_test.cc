#include "engine/synth/plan.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/quant/quant.h"
#include "engine/synth/fill.h"
#include "engine/synth/presets.h"
#include "engine/synth/quant_recipe.h"
#include "gtest/gtest.h"

namespace stepserve::synth {
namespace {

using Ne = std::vector<int64_t>;

Step35Config Preset(std::string_view name) {
  absl::StatusOr<Step35Config> c = PresetConfig(name);
  EXPECT_TRUE(c.ok()) << c.status();
  if (c->n_vocab == 0) c->n_vocab = 3000;
  return *c;
}

QuantRecipe Recipe(std::string_view name) {
  absl::StatusOr<QuantRecipe> r = RecipeByName(name);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

const TensorSpec& Get(const ModelPlan& plan, const std::string& name) {
  const TensorSpec* t = plan.Find(name);
  if (t == nullptr) {
    ADD_FAILURE() << "missing tensor " << name;
    static const TensorSpec kEmpty{"", "", -1, {1}};
    return kEmpty;
  }
  return *t;
}

std::string Blk(int il, std::string_view rest) { return absl::StrFormat("blk.%d.%s", il, rest); }

TEST(PresetTest, Step35FlashHyperparameters) {
  const Step35Config c = Preset("step-3.5-flash");
  EXPECT_EQ(c.block_count(), 48);
  int full = 0;
  for (int il = 0; il < c.block_count(); ++il) {
    const bool trunk = il < 45;
    EXPECT_EQ(c.is_swa[il], !trunk || il % 4 != 0) << il;
    EXPECT_EQ(c.head_count[il], c.is_swa[il] ? 96 : 64) << il;
    EXPECT_EQ(c.head_count_kv[il], 8);
    EXPECT_EQ(c.is_moe[il], trunk && il >= 3) << il;
    const bool clamped = il == 43 || il == 44;
    EXPECT_EQ(c.clamp_exp[il], clamped ? 7.0f : 0.0f) << il;
    EXPECT_EQ(c.clamp_shexp[il], clamped ? 16.0f : 0.0f) << il;
    full += c.is_swa[il] ? 0 : 1;
  }
  EXPECT_EQ(full, 12);
  // Spec 3.5: 14 x 1.0, seven smooth values, 11 x 2.0, then padding to 64 entries with 1.0.
  const std::vector<float> ff = ComputeRopeFreqs(c);
  ASSERT_EQ(ff.size(), 64u);
  for (int j = 0; j < 14; ++j) EXPECT_EQ(ff[j], 1.0f) << j;
  const float smooth[] = {1.138363f, 1.374499f, 1.576436f, 1.733729f,
                          1.847569f, 1.925649f, 1.977251f};
  for (int j = 0; j < 7; ++j) EXPECT_NEAR(ff[14 + j], smooth[j], 2e-6) << j;
  for (int j = 21; j < 32; ++j) EXPECT_EQ(ff[j], 2.0f) << j;
  for (int j = 32; j < 64; ++j) EXPECT_EQ(ff[j], 1.0f) << j;
}

TEST(PresetTest, TinyMatchesSpec81) {
  const Step35Config c = Preset("tiny");
  EXPECT_EQ(c.head_count, (std::vector<int32_t>{4, 6, 6, 6, 4, 6, 6, 6, 6}));
  EXPECT_EQ(c.head_count_kv, std::vector<int32_t>(9, 2));
  EXPECT_EQ(c.is_swa, (std::vector<bool>{false, true, true, true, false, true, true, true, true}));
  EXPECT_EQ(c.is_moe,
            (std::vector<bool>{false, false, true, true, true, true, false, false, false}));
  EXPECT_EQ(c.clamp_exp, (std::vector<float>{0, 0, 0, 0, 0.5f, 0.5f, 0, 0, 0}));
  EXPECT_EQ(c.clamp_shexp, (std::vector<float>{0, 0.4f, 0, 0, 0.4f, 0.4f, 0, 0, 0}));
  const std::vector<float> ff = ComputeRopeFreqs(c);
  ASSERT_EQ(ff.size(), 16u);
  // r = 16, theta 5e6, L_orig 256: the first pair rotates fast (1.0), the last ones slowly
  // (factor 2), and some lie in between.
  EXPECT_EQ(ff[0], 1.0f);
  EXPECT_EQ(ff[7], 2.0f);
  int smooth = 0;
  for (int j = 0; j < 8; ++j) smooth += (ff[j] > 1.0f && ff[j] < 2.0f) ? 1 : 0;
  EXPECT_GT(smooth, 0);
  for (int j = 8; j < 16; ++j) EXPECT_EQ(ff[j], 1.0f);
}

TEST(PresetTest, KeepTrunkLayersRenumbersMtp) {
  Step35Config c = Preset("step-3.5-flash");
  ASSERT_TRUE(KeepTrunkLayers(4, &c).ok());
  EXPECT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.block_count(), 7);
  EXPECT_EQ(c.head_count, (std::vector<int32_t>{64, 96, 96, 96, 96, 96, 96}));
  EXPECT_EQ(c.is_swa, (std::vector<bool>{false, true, true, true, true, true, true}));
  EXPECT_EQ(c.clamp_exp, std::vector<float>(7, 0.0f));  // 43/44 are gone
  Step35Config d = Preset("step-3.5-flash");
  ASSERT_TRUE(KeepTrunkLayers(45, &d).ok());
  EXPECT_FALSE(KeepTrunkLayers(46, &d).ok());
  EXPECT_FALSE(KeepTrunkLayers(0, &d).ok());
}

TEST(PlanTest, Step35FlashTrueShapes) {
  const Step35Config c = Preset("step-3.5-flash");
  absl::StatusOr<ModelPlan> trunk = BuildPlan(c, Recipe("iq4_xs"), FilePart::kTrunkOnly);
  ASSERT_TRUE(trunk.ok()) << trunk.status();
  EXPECT_EQ(trunk->tensors.size(), 754u);  // the official trunk-only file
  EXPECT_EQ(trunk->config.block_count(), 45);
  absl::StatusOr<ModelPlan> plan = BuildPlan(c, Recipe("iq4_xs"), FilePart::kCombined);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tensors.size(), 805u);
  EXPECT_EQ(static_cast<int64_t>(plan->tensors.size()),
            ExpectedTensorCount(c, FilePart::kCombined));
  absl::StatusOr<ModelPlan> mtp = BuildPlan(c, Recipe("iq4_xs"), FilePart::kMtpOnly);
  ASSERT_TRUE(mtp.ok());
  EXPECT_EQ(mtp->tensors.size(), 55u);

  const ModelPlan& p = *plan;
  EXPECT_EQ(Get(p, "token_embd.weight").ne, (Ne{4096, 128896}));
  EXPECT_EQ(Get(p, "output.weight").ne, (Ne{4096, 128896}));
  EXPECT_EQ(Get(p, "output_norm.weight").ne, (Ne{4096}));
  EXPECT_EQ(Get(p, "rope_freqs.weight").ne, (Ne{64}));
  EXPECT_EQ(Get(p, "blk.0.attn_q.weight").ne, (Ne{4096, 8192}));
  EXPECT_EQ(Get(p, "blk.1.attn_q.weight").ne, (Ne{4096, 12288}));
  EXPECT_EQ(Get(p, "blk.0.attn_output.weight").ne, (Ne{8192, 4096}));
  EXPECT_EQ(Get(p, "blk.1.attn_output.weight").ne, (Ne{12288, 4096}));
  EXPECT_EQ(Get(p, "blk.0.attn_gate.weight").ne, (Ne{4096, 64}));
  EXPECT_EQ(Get(p, "blk.1.attn_gate.weight").ne, (Ne{4096, 96}));
  EXPECT_EQ(Get(p, "blk.5.attn_k.weight").ne, (Ne{4096, 1024}));
  EXPECT_EQ(Get(p, "blk.5.attn_v.weight").ne, (Ne{4096, 1024}));
  EXPECT_EQ(Get(p, "blk.5.attn_q_norm.weight").ne, (Ne{128}));
  EXPECT_EQ(Get(p, "blk.2.ffn_gate.weight").ne, (Ne{4096, 11264}));
  EXPECT_EQ(Get(p, "blk.2.ffn_down.weight").ne, (Ne{11264, 4096}));
  EXPECT_EQ(p.Find("blk.2.ffn_gate_inp.weight"), nullptr);
  EXPECT_EQ(p.Find("blk.3.ffn_gate.weight"), nullptr);
  EXPECT_EQ(Get(p, "blk.3.ffn_gate_inp.weight").ne, (Ne{4096, 288}));
  EXPECT_EQ(Get(p, "blk.3.ffn_gate_inp.weight").type, GgmlType::kF32);
  EXPECT_EQ(Get(p, "blk.3.exp_probs_b.bias").ne, (Ne{288}));
  EXPECT_EQ(Get(p, "blk.3.ffn_gate_exps.weight").ne, (Ne{4096, 1280, 288}));
  EXPECT_EQ(Get(p, "blk.3.ffn_up_exps.weight").ne, (Ne{4096, 1280, 288}));
  EXPECT_EQ(Get(p, "blk.44.ffn_down_exps.weight").ne, (Ne{1280, 4096, 288}));
  EXPECT_EQ(Get(p, "blk.44.ffn_gate_shexp.weight").ne, (Ne{4096, 1280}));
  EXPECT_EQ(Get(p, "blk.44.ffn_down_shexp.weight").ne, (Ne{1280, 4096}));
  // MTP layers: SWA attention, dense FFN, nextn tensors.
  EXPECT_EQ(Get(p, "blk.45.attn_q.weight").ne, (Ne{4096, 12288}));
  EXPECT_EQ(Get(p, "blk.47.ffn_gate.weight").ne, (Ne{4096, 11264}));
  EXPECT_EQ(Get(p, "blk.45.nextn.eh_proj.weight").ne, (Ne{8192, 4096}));
  EXPECT_EQ(Get(p, "blk.46.nextn.enorm.weight").ne, (Ne{4096}));
  EXPECT_EQ(Get(p, "blk.46.nextn.hnorm.weight").ne, (Ne{4096}));
  EXPECT_EQ(Get(p, "blk.47.nextn.shared_head_norm.weight").ne, (Ne{4096}));
  EXPECT_EQ(Get(p, "blk.47.nextn.shared_head_head.weight").ne, (Ne{4096, 128896}));
  EXPECT_EQ(p.Find("blk.45.nextn.embed_tokens.weight"), nullptr);
  // iq4_xs recipe: IQ4_XS matrices, attn_v Q5_K, output Q6_K, F32 small tensors.
  EXPECT_EQ(Get(p, "blk.3.ffn_gate_exps.weight").type, GgmlType::kIQ4_XS);
  EXPECT_EQ(Get(p, "blk.3.attn_v.weight").type, GgmlType::kQ5_K);
  EXPECT_EQ(Get(p, "output.weight").type, GgmlType::kQ6_K);
  EXPECT_EQ(Get(p, "token_embd.weight").type, GgmlType::kIQ4_XS);
  EXPECT_EQ(Get(p, "blk.3.attn_norm.weight").type, GgmlType::kF32);
  EXPECT_EQ(Get(p, "rope_freqs.weight").type, GgmlType::kF32);
  EXPECT_EQ(p.file_type, 30u);
  EXPECT_TRUE(p.notes.empty());
  // Real-size presets fill quantized matrices with random blocks (fast), floats stay exact.
  EXPECT_TRUE(Get(p, "output.weight").random_blocks);
  EXPECT_TRUE(Get(p, "blk.3.ffn_gate_exps.weight").random_blocks);
  EXPECT_FALSE(Get(p, "rope_freqs.weight").random_blocks);
  // MTP-only: globals plus layers 45..47 only.
  EXPECT_NE(mtp->Find("output.weight"), nullptr);
  EXPECT_EQ(mtp->Find("blk.0.attn_norm.weight"), nullptr);
  EXPECT_NE(mtp->Find("blk.45.attn_norm.weight"), nullptr);
}

TEST(PlanTest, Step5Shapes) {
  const Step35Config c = Preset("step-5");
  absl::StatusOr<ModelPlan> plan = BuildPlan(c, Recipe("step5-q2"), FilePart::kCombined);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Dense fallback: 1783 minus the 23 x 8 sparse-indexer tensors.
  EXPECT_EQ(plan->tensors.size(), 1783u - 23 * 8);
  EXPECT_EQ(Get(*plan, "blk.3.attn_q.weight").ne, (Ne{4096, 12288}));
  EXPECT_EQ(Get(*plan, "blk.3.attn_k.weight").ne, (Ne{4096, 768}));
  EXPECT_EQ(Get(*plan, "rope_freqs.weight").ne, (Ne{96}));
  EXPECT_EQ(Get(*plan, "blk.91.ffn_gate.weight").ne, (Ne{4096, 13824}));
  EXPECT_EQ(Get(*plan, "blk.90.ffn_down_exps.weight").ne, (Ne{1536, 4096, 352}));
  EXPECT_EQ(Get(*plan, "blk.90.ffn_gate_exps.weight").type, GgmlType::kIQ2_XXS);
  EXPECT_EQ(Get(*plan, "blk.90.ffn_down_exps.weight").type, GgmlType::kQ2_K);
  EXPECT_EQ(Get(*plan, "blk.90.attn_q.weight").type, GgmlType::kQ8_0);
  EXPECT_EQ(Get(*plan, "token_embd.weight").type, GgmlType::kBF16);
  EXPECT_EQ(Get(*plan, "blk.93.attn_q.weight").type, GgmlType::kQ6_K);
  EXPECT_EQ(Get(*plan, "blk.93.nextn.eh_proj.weight").type, GgmlType::kQ6_K);
  for (float v : ComputeRopeFreqs(c)) EXPECT_EQ(v, 1.0f);
}

TEST(PlanTest, RecipesGiveDocumentedTypes) {
  Step35Config c = Preset("step-3.5-flash");
  ASSERT_TRUE(KeepTrunkLayers(8, &c).ok());  // block_count 11
  absl::StatusOr<ModelPlan> q4 = BuildPlan(c, Recipe("q4_k_m"), FilePart::kCombined);
  ASSERT_TRUE(q4.ok());
  EXPECT_EQ(q4->file_type, 15u);
  EXPECT_EQ(Get(*q4, "output.weight").type, GgmlType::kQ6_K);
  EXPECT_EQ(Get(*q4, "token_embd.weight").type, GgmlType::kQ4_K);
  // use_more_bits(i, 11): i < 1 || i >= 9 || (i - 1) % 3 == 2 -> layers 0, 3, 6, 9, 10.
  for (int il = 0; il < 11; ++il) {
    const bool more = il == 0 || il == 3 || il == 6 || il == 9 || il == 10;
    const GgmlType want = more ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    EXPECT_EQ(Get(*q4, Blk(il, "attn_v.weight")).type, want) << il;
    const std::string down = il >= 3 && il < 8 ? "ffn_down_exps.weight" : "ffn_down.weight";
    EXPECT_EQ(Get(*q4, Blk(il, down)).type, want) << il;
    EXPECT_EQ(Get(*q4, Blk(il, "attn_q.weight")).type, GgmlType::kQ4_K) << il;
  }
  absl::StatusOr<ModelPlan> mq = BuildPlan(c, Recipe("step37-mq83"), FilePart::kCombined);
  ASSERT_TRUE(mq.ok());
  EXPECT_EQ(Get(*mq, "blk.4.ffn_up_exps.weight").type, GgmlType::kIQ2_XXS);
  EXPECT_EQ(Get(*mq, "blk.4.ffn_down_exps.weight").type, GgmlType::kQ4_K);
  EXPECT_EQ(Get(*mq, "blk.4.ffn_down_shexp.weight").type, GgmlType::kQ8_0);
  EXPECT_EQ(Get(*mq, "blk.4.attn_gate.weight").type, GgmlType::kQ8_0);
  EXPECT_EQ(Get(*mq, "token_embd.weight").type, GgmlType::kQ8_0);
  EXPECT_EQ(Get(*mq, "blk.9.nextn.shared_head_head.weight").type, GgmlType::kQ8_0);

  QuantRecipe custom = Recipe("iq4_xs");
  ASSERT_TRUE(ApplyTypeOverride("attn", "q8_0", &custom).ok());
  ASSERT_TRUE(ApplyTypeOverride("attn-k", "bf16", &custom).ok());
  ASSERT_TRUE(ApplyTypeOverride("mtp", "q6_k", &custom).ok());
  EXPECT_FALSE(ApplyTypeOverride("attn", "q9_9", &custom).ok());
  EXPECT_FALSE(ApplyTypeOverride("bogus", "q8_0", &custom).ok());
  absl::StatusOr<ModelPlan> cp = BuildPlan(c, custom, FilePart::kCombined);
  ASSERT_TRUE(cp.ok());
  EXPECT_EQ(Get(*cp, "blk.1.attn_q.weight").type, GgmlType::kQ8_0);
  EXPECT_EQ(Get(*cp, "blk.1.attn_k.weight").type, GgmlType::kBF16);
  EXPECT_EQ(Get(*cp, "blk.1.ffn_up.weight").type, GgmlType::kIQ4_XS);
  EXPECT_EQ(Get(*cp, "blk.8.attn_k.weight").type, GgmlType::kQ6_K);
  EXPECT_EQ(cp->file_type, 30u);  // IQ4_XS still holds most elements
}

TEST(PlanTest, TinyCountsAndFallbacks) {
  const Step35Config c = Preset("tiny");
  absl::StatusOr<ModelPlan> plan = BuildPlan(c, Recipe("mix"), FilePart::kCombined);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tensors.size(), 4u + 2 * 12 + 4 * 17 + 3 * 17);
  // ffn_down_exps rows have 64 elements: Q6_K (256) does not fit, llama-quantize uses Q8_0.
  EXPECT_EQ(Get(*plan, "blk.2.ffn_down_exps.weight").type, GgmlType::kQ8_0);
  EXPECT_EQ(Get(*plan, "blk.2.ffn_gate_exps.weight").type, GgmlType::kQ4_K);
  EXPECT_EQ(Get(*plan, "blk.2.attn_q.weight").type, GgmlType::kQ8_0);
  EXPECT_EQ(Get(*plan, "token_embd.weight").type, GgmlType::kF16);
  EXPECT_FALSE(plan->notes.empty());
  for (const TensorSpec& t : plan->tensors) EXPECT_FALSE(t.random_blocks) << t.name;
  EXPECT_EQ(ResolveType(GgmlType::kQ4_K, 256).value(), GgmlType::kQ4_K);
  EXPECT_EQ(ResolveType(GgmlType::kIQ4_XS, 96).value(), GgmlType::kIQ4_NL);
  EXPECT_EQ(ResolveType(GgmlType::kQ8_0, 48).value(), GgmlType::kF16);
}

TEST(FillTest, RandomBlocksAndQuantizedPathsHitTheTargetRms) {
  for (bool random_blocks : {false, true}) {
    TensorSpec t{"blk.0.attn_q.weight", "attn_q", 0, {512, 8}, GgmlType::kQ6_K};
    t.scale = 0.05f;
    t.random_blocks = random_blocks;
    std::vector<uint8_t> buf(static_cast<size_t>(t.nbytes()));
    ASSERT_TRUE(FillTensor(t, {}, 3, 2, buf.data(), buf.size()).ok());
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    ASSERT_TRUE(quant::DequantizeRow(t.type, buf.data(), v.data(), t.n_elements()).ok());
    double sum2 = 0;
    for (float x : v) sum2 += double(x) * x;
    const double rms = std::sqrt(sum2 / v.size());
    EXPECT_GT(rms, 0.025) << random_blocks;
    EXPECT_LT(rms, 0.1) << random_blocks;
    // The size is checked against the plan.
    EXPECT_FALSE(FillTensor(t, {}, 3, 2, buf.data(), buf.size() - 1).ok());
  }
}

}  // namespace
}  // namespace stepserve::synth
