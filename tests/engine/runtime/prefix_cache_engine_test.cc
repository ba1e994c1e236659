// Prefix caching through the engine on the tiny model (block 16, sliding window 16): a repeated
// prompt starts from the cached blocks, reports them as cached tokens, and generates exactly what
// it generates without the cache.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "tests/engine/runtime/engine_fixture.h"

namespace stepserve::engine {
namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  int32_t started_cached = -1;
  Usage usage;
};

Outcome RunToEnd(Engine& engine, GenerationRequest request) {
  auto sink = std::make_shared<RecordingSink>();
  EXPECT_TRUE(engine.Submit(std::move(request), sink).ok());
  const FinishedEvent finished = sink->Wait();
  EXPECT_EQ(finished.reason, FinishReason::kLength);
  return {sink->tokens(), sink->started_event().cached_tokens, finished.usage};
}

TEST_F(EngineTest, RepeatedPromptHitsTheCacheAndGeneratesTheSame) {
  EngineConfig off = Config();
  off.prefix_cache = false;
  const std::vector<int32_t> prompt = Prompt(41, 77);
  const std::vector<int32_t> uncached = RunAlone(off, Greedy("x", prompt, 20));
  ASSERT_EQ(uncached.size(), 20u);

  std::unique_ptr<Engine> engine = MakeEngine(Config());
  const Outcome first = RunToEnd(*engine, Greedy("a", prompt, 20));
  EXPECT_EQ(first.usage.cached_tokens, 0);
  EXPECT_EQ(first.tokens, uncached);
  // 41 tokens: the hit stops before the block of the last token, at 32 (2 blocks of 16).
  const Outcome second = RunToEnd(*engine, Greedy("b", prompt, 20));
  EXPECT_EQ(second.started_cached, 32);
  EXPECT_EQ(second.usage.cached_tokens, 32);
  EXPECT_EQ(second.usage.prompt_tokens, 41);
  EXPECT_EQ(second.tokens, uncached);
  EXPECT_DOUBLE_EQ(engine->GetLoad().prefix_cache_hit_rate, 32.0 / 82.0);
  // A prompt sharing 20 tokens hits one block, and the cached blocks all count as free.
  std::vector<int32_t> partial = Prompt(30, 5);
  std::copy(prompt.begin(), prompt.begin() + 20, partial.begin());
  EXPECT_EQ(RunToEnd(*engine, Greedy("c", partial, 4)).usage.cached_tokens, 16);
  WaitIdle(*engine);
  EXPECT_EQ(engine->kv_blocks().full_free, engine->kv_blocks().full_total);
  EXPECT_EQ(engine->kv_blocks().swa_free, engine->kv_blocks().swa_total);
}

TEST_F(EngineTest, CacheOffReportsNoCachedTokens) {
  EngineConfig off = Config();
  off.prefix_cache = false;
  std::unique_ptr<Engine> engine = MakeEngine(off);
  const std::vector<int32_t> prompt = Prompt(40, 9);
  RunToEnd(*engine, Greedy("a", prompt, 3));
  EXPECT_EQ(RunToEnd(*engine, Greedy("b", prompt, 3)).usage.cached_tokens, 0);
  EXPECT_EQ(engine->GetLoad().prefix_cache_hit_rate, 0);
}

TEST_F(EngineTest, HitWhileTheFirstRequestRunsAndLongPromptsPastTheWindow) {
  // 100-token prompts reach well past the 16-token sliding window: a hit needs the sliding blocks
  // of its last window, which the first request still holds while it decodes.
  EngineConfig off = Config();
  off.prefix_cache = false;
  const std::vector<int32_t> prompt = Prompt(100, 31);
  const std::vector<int32_t> uncached = RunAlone(off, Greedy("x", prompt, 30));

  std::unique_ptr<Engine> engine = MakeEngine(Config());
  auto running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(Greedy("a", prompt, 30), running).ok());
  ASSERT_TRUE(running->WaitForTokens(2));
  const Outcome second = RunToEnd(*engine, Greedy("b", prompt, 30));
  EXPECT_EQ(second.usage.cached_tokens, 96);
  EXPECT_EQ(second.tokens, uncached);
  running->Wait();
  EXPECT_EQ(running->tokens(), uncached);
}

}  // namespace
}  // namespace stepserve::engine
