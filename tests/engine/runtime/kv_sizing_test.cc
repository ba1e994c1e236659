#include "engine/runtime/kv_sizing.h"

#include <gtest/gtest.h>

#include <string>

namespace stepserve::engine {
namespace {

// 4 layers (full, swa, full, swa), 2 KV heads of dim 4 for K and V: 64 bytes per layer per
// position, so 128 bytes per position for each kind; window 16.
model::Hparams Hp() {
  model::Hparams hp;
  hp.n_layer = hp.n_layer_all = 4;
  hp.sliding_window = 16;
  for (int il = 0; il < 4; ++il) {
    model::LayerHparams l;
    l.n_head = 4;
    l.n_head_kv = 2;
    l.head_dim_k = l.head_dim_v = 4;
    l.is_swa = il % 2 == 1;
    hp.layers.push_back(l);
  }
  return hp;
}

struct Case {
  std::string name;
  KvSizingInput input;
  int32_t full_blocks, swa_blocks;
  uint64_t bytes;
  std::string error;  // substring; empty: OK
};

class KvSizingTest : public ::testing::TestWithParam<Case> {};

TEST_P(KvSizingTest, Sizes) {
  const Case& c = GetParam();
  absl::StatusOr<KvSizing> sizing = SizeKvCache(Hp(), c.input);
  if (!c.error.empty()) {
    ASSERT_FALSE(sizing.ok());
    EXPECT_EQ(sizing.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(sizing.status().message().find(c.error), absl::string_view::npos) << sizing.status();
    return;
  }
  ASSERT_TRUE(sizing.ok()) << sizing.status();
  EXPECT_EQ(sizing->full_blocks, c.full_blocks);
  EXPECT_EQ(sizing->swa_blocks, c.swa_blocks);
  EXPECT_EQ(sizing->bytes, c.bytes);
}

KvSizingInput In(int64_t blocks, double gib, int32_t slack = 0) {
  return {.ctx_size = 256,
          .kv_cache_gib = gib,
          .kv_cache_blocks = blocks,
          .block_size = 16,
          .max_running = 4,
          .max_step_tokens = 64,
          .rollback_slack = slack,
          .end_layer = 4};
}

KvSizingInput InF16(int64_t blocks, double gib) {
  KvSizingInput in = In(blocks, gib);
  in.kv_dtype = KvDtype::kF16;
  return in;
}

// Sliding pool: (ceil((16 + slack) / 16) + 2) per running sequence * 4 + ceil(64 / 16).
INSTANTIATE_TEST_SUITE_P(
    Table, KvSizingTest,
    ::testing::Values(
        Case{"Blocks", In(100, 0), 100, 16, 100 * 16 * 128 + 16 * 16 * 128, ""},
        Case{"BlocksOverrideGib", In(100, 8.0), 100, 16, 100 * 16 * 128 + 16 * 16 * 128, ""},
        Case{"SlackWidensWindow", In(100, 0, 3), 100, 20, 100 * 16 * 128 + 20 * 16 * 128, ""},
        // 1 MiB: 32768 bytes of sliding pages, the rest in 2048-byte full blocks.
        Case{"Gib", In(0, 1.0 / 1024), 496, 16, 496 * 2048 + 32768, ""},
        Case{"GibTooSmall", In(0, 1e-5), 0, 0, 0, "kv_cache_gib"},
        // Default: every running sequence at full context (4 * 256 tokens).
        Case{"Default", In(0, 0), 64, 16, 64 * 2048 + 32768, ""},
        // F16: half the bytes per position, so the same 1 MiB holds 16384 bytes of sliding pages
        // and 1008 full blocks of 1024 bytes.
        Case{"GibF16", InF16(0, 1.0 / 1024), 1008, 16, 1008 * 1024 + 16384, ""},
        Case{"BlocksF16", InF16(100, 0), 100, 16, 100 * 16 * 64 + 16 * 16 * 64, ""},
        Case{"NegativeBlocks", In(-1, 0), 0, 0, 0, "kv_cache_blocks"},
        Case{"BadBlockSize",
             {.ctx_size = 256, .block_size = 0, .max_running = 4, .end_layer = 4},
             0,
             0,
             0,
             "block_size"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace stepserve::engine
