// The engine loop end to end on the tiny synthetic step35 model (f32 weights): a real model file,
// the real scheduler, KV cache, sampler and tokenizer, and sinks that record what they receive.
#include "engine/runtime/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/runtime/engine_fixture.h"

namespace stepserve::engine {
namespace {

using std::chrono::milliseconds;

TEST_F(EngineTest, ThirtyTwoConcurrentRequestsFinishWithCorrectUsage) {
  std::unique_ptr<Engine> engine = MakeEngine(Config());
  const Engine::KvBlocks idle = engine->kv_blocks();
  constexpr int kRequests = 32;
  std::vector<std::shared_ptr<RecordingSink>> sinks(kRequests);
  std::vector<int> prompt_len(kRequests), max_new(kRequests);
  std::vector<std::thread> submitters;
  for (int t = 0; t < 4; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = t; i < kRequests; i += 4) {
        prompt_len[i] = 3 + (i * 7) % 40;
        max_new[i] = 2 + i % 6;
        sinks[i] = std::make_shared<RecordingSink>();
        GenerationRequest request =
            Greedy("r" + std::to_string(i), Prompt(prompt_len[i], i), max_new[i]);
        if (i % 2 == 1) {
          request.sampling.temperature = 0.8f;  // sampled requests in the same batches
          request.sampling.top_k = 40;
          request.return_logprobs = true;
          request.top_logprobs = 2;
        }
        ASSERT_TRUE(engine->Submit(std::move(request), sinks[i]).ok());
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  for (int i = 0; i < kRequests; ++i) {
    const FinishedEvent finished = sinks[i]->Wait();
    EXPECT_EQ(finished.reason, FinishReason::kLength) << i;
    EXPECT_EQ(finished.usage.prompt_tokens, prompt_len[i]) << i;
    EXPECT_EQ(finished.usage.completion_tokens, max_new[i]) << i;
    EXPECT_EQ(static_cast<int>(sinks[i]->tokens().size()), max_new[i]) << i;
    EXPECT_EQ(sinks[i]->started(), 1) << i;
    EXPECT_EQ(sinks[i]->after_finish(), 0) << i;
    EXPECT_GE(finished.timings.e2e_s, finished.timings.ttft_s);
    EXPECT_GT(finished.timings.ttft_s, 0);
    int32_t last = 0;
    for (const DeltaEvent& delta : sinks[i]->deltas()) {
      EXPECT_EQ(delta.completion_tokens, last + static_cast<int32_t>(delta.token_ids.size()));
      last = delta.completion_tokens;
      if (i % 2 == 1) {
        ASSERT_EQ(delta.logprobs.size(), delta.token_ids.size());
        for (const TokenLogprob& lp : delta.logprobs) {
          EXPECT_LE(lp.logprob, 0.0f);
          EXPECT_EQ(lp.top.size(), 2u);
        }
      }
    }
  }
  WaitIdle(*engine);
  EXPECT_EQ(engine->kv_blocks().full_free, idle.full_free);
  EXPECT_EQ(engine->kv_blocks().swa_free, idle.swa_free);
  EXPECT_EQ(idle.full_free, idle.full_total);
}

TEST_F(EngineTest, GreedyOutputIsTheSameAloneAndInABusyBatch) {
  const EngineConfig config = Config();
  const std::vector<int32_t> prompt = Prompt(21, 1234);
  const std::vector<int32_t> alone = RunAlone(config, Greedy("x", prompt, 12));
  ASSERT_EQ(alone.size(), 12u);

  std::unique_ptr<Engine> engine = MakeEngine(config);
  std::vector<std::shared_ptr<RecordingSink>> others;
  for (int i = 0; i < 6; ++i) {  // running before the request arrives: decodes + prefills mixed
    others.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(engine
                    ->Submit(Greedy("o" + std::to_string(i), Prompt(5 + 17 * i, 50 + i), 20 + i),
                             others.back())
                    .ok());
  }
  others[0]->WaitForTokens(2);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(Greedy("x", prompt, 12), sink).ok());
  for (int i = 0; i < 3; ++i) {  // and more arriving after it
    others.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(
        engine->Submit(Greedy("p" + std::to_string(i), Prompt(60 + i, 90 + i), 8), others.back())
            .ok());
  }
  EXPECT_EQ(sink->Wait().reason, FinishReason::kLength);
  EXPECT_EQ(sink->tokens(), alone);
  for (auto& other : others) EXPECT_EQ(other->Wait().reason, FinishReason::kLength);
}

TEST_F(EngineTest, DeviceSamplingGivesTheSameGreedyTokensAndLogprobs) {
  // Device sampling takes each row's top entries, argmax and log-sum-exp from the backend
  // (Backend::LogitsTopK; on the CPU backend its reference) instead of the full logits.
  // Counts the sequences each step sampled from the backend's top entries.
  struct DeviceSampledCounter : EngineObserver {
    std::atomic<int64_t> seqs{0};
    void OnStep(const StepStats& stats) override { seqs += stats.device_sampled_seqs; }
  };
  EngineConfig config = Config();
  auto run = [&](bool device_sampling) {
    auto counter = std::make_shared<DeviceSampledCounter>();
    config.device_sampling = device_sampling;
    config.observer = counter;
    std::unique_ptr<Engine> engine = MakeEngine(config);
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    for (int i = 0; i < 3; ++i) {
      GenerationRequest request = Greedy("g" + std::to_string(i), Prompt(9 + 7 * i, 70 + i), 10);
      request.return_logprobs = true;
      request.top_logprobs = 5;
      sinks.push_back(std::make_shared<RecordingSink>());
      EXPECT_TRUE(engine->Submit(std::move(request), sinks.back()).ok());
    }
    std::vector<std::vector<TokenLogprob>> logprobs;
    for (auto& sink : sinks) {
      EXPECT_EQ(sink->Wait().reason, FinishReason::kLength);
      logprobs.emplace_back();
      for (const DeltaEvent& delta : sink->deltas()) {
        logprobs.back().insert(logprobs.back().end(), delta.logprobs.begin(), delta.logprobs.end());
      }
    }
    engine->Stop();
    // Every one of the 3 x 10 tokens came from the top entries, or none did.
    EXPECT_EQ(counter->seqs.load(), device_sampling ? 30 : 0);
    return logprobs;
  };
  const std::vector<std::vector<TokenLogprob>> host = run(false), device = run(true);
  ASSERT_EQ(host.size(), device.size());
  for (size_t r = 0; r < host.size(); ++r) {
    ASSERT_EQ(host[r].size(), 10u);
    ASSERT_EQ(device[r].size(), host[r].size());
    for (size_t t = 0; t < host[r].size(); ++t) {
      EXPECT_EQ(device[r][t].token_id, host[r][t].token_id) << "request " << r << " token " << t;
      EXPECT_NEAR(device[r][t].logprob, host[r][t].logprob, 1e-4);
      ASSERT_EQ(device[r][t].top.size(), host[r][t].top.size());
      for (size_t j = 0; j < host[r][t].top.size(); ++j) {
        EXPECT_EQ(device[r][t].top[j].first, host[r][t].top[j].first);
        EXPECT_NEAR(device[r][t].top[j].second, host[r][t].top[j].second, 1e-4);
      }
    }
  }
}

TEST_F(EngineTest, F16KvCacheHoldsTwiceTheBlocksAndKeepsGreedyOutput) {
  // The same 4 MiB budget: F16 pages are half the bytes, so the full pool gets twice the blocks
  // or more; greedy output stays the same (the cache rounds each cached value to F16 only).
  EngineConfig config = Config();
  config.kv_cache_blocks = 0;
  config.kv_cache_gib = 4.0 / 1024;
  auto run = [&](KvDtype dtype, int64_t* full_blocks, uint64_t* kv_bytes) {
    config.kv_dtype = dtype;
    std::unique_ptr<Engine> engine = MakeEngine(config);
    *full_blocks = engine->model_info().kv_full_blocks;
    *kv_bytes = engine->model_info().kv_bytes;
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    for (int i = 0; i < 3; ++i) {
      sinks.push_back(std::make_shared<RecordingSink>());
      EXPECT_TRUE(engine
                      ->Submit(Greedy("k" + std::to_string(i), Prompt(12 + 9 * i, 90 + i), 12),
                               sinks.back())
                      .ok());
    }
    std::vector<std::vector<int32_t>> tokens;
    for (auto& sink : sinks) {
      EXPECT_EQ(sink->Wait().reason, FinishReason::kLength);
      tokens.push_back(sink->tokens());
    }
    engine->Stop();
    return tokens;
  };
  int64_t blocks32 = 0, blocks16 = 0;
  uint64_t bytes32 = 0, bytes16 = 0;
  const std::vector<std::vector<int32_t>> f32 = run(KvDtype::kF32, &blocks32, &bytes32);
  const std::vector<std::vector<int32_t>> f16 = run(KvDtype::kF16, &blocks16, &bytes16);
  const uint64_t budget = uint64_t{4} << 20;
  EXPECT_LE(bytes32, budget);
  EXPECT_LE(bytes16, budget);
  // At least twice the blocks: the full pool's blocks and the sliding pool (sized in tokens)
  // both halve in bytes, so what the sliding pool frees goes to full blocks as well.
  EXPECT_GE(blocks16, 2 * blocks32);
  EXPECT_EQ(f16, f32);
}

TEST_F(EngineTest, CancelWhileQueuedAndWhileRunningFreesKv) {
  EngineConfig config = Config();
  config.max_running = 1;
  std::unique_ptr<Engine> engine = MakeEngine(config);
  const Engine::KvBlocks idle = engine->kv_blocks();
  auto running = std::make_shared<RecordingSink>();
  auto queued = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(Greedy("long", Prompt(40, 1), 0), running).ok());
  ASSERT_TRUE(running->WaitForTokens(3));
  ASSERT_TRUE(engine->Submit(Greedy("queued", Prompt(30, 2), 0), queued).ok());
  EXPECT_LT(engine->kv_blocks().full_free, idle.full_free);  // the long one holds blocks

  EXPECT_TRUE(engine->Cancel("queued"));
  FinishedEvent q = queued->Wait();
  EXPECT_EQ(q.reason, FinishReason::kCancelled);
  EXPECT_EQ(queued->started(), 0);
  EXPECT_EQ(q.usage.completion_tokens, 0);

  EXPECT_TRUE(engine->Cancel("long"));
  FinishedEvent r = running->Wait();
  EXPECT_EQ(r.reason, FinishReason::kCancelled);
  EXPECT_EQ(running->started(), 1);
  EXPECT_EQ(r.usage.completion_tokens, static_cast<int32_t>(running->tokens().size()));
  EXPECT_FALSE(engine->Cancel("long"));  // no longer live
  EXPECT_FALSE(engine->Cancel("never-submitted"));
  WaitIdle(*engine);
  EXPECT_EQ(engine->kv_blocks().full_free, idle.full_free);
  EXPECT_EQ(engine->kv_blocks().swa_free, idle.swa_free);
  // The id can be reused once finished.
  auto again = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(Greedy("long", Prompt(4, 3), 2), again).ok());
  EXPECT_EQ(again->Wait().reason, FinishReason::kLength);
}

TEST_F(EngineTest, DeadlineWhileQueuedAndWhileRunningFreesKv) {
  EngineConfig config = Config();
  config.ctx_size = 4096;
  config.max_running = 1;
  std::unique_ptr<Engine> engine = MakeEngine(config);
  const Engine::KvBlocks idle = engine->kv_blocks();
  const auto now = std::chrono::steady_clock::now();
  GenerationRequest long_request = Greedy("long", Prompt(10, 1), 0);  // up to the context
  long_request.deadline = now + milliseconds(400);
  GenerationRequest queued_request = Greedy("queued", Prompt(10, 2), 4);
  queued_request.deadline = now + milliseconds(150);
  auto running = std::make_shared<RecordingSink>();
  auto queued = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(std::move(long_request), running).ok());
  ASSERT_TRUE(engine->Submit(std::move(queued_request), queued).ok());

  FinishedEvent q = queued->Wait();
  EXPECT_EQ(q.reason, FinishReason::kDeadlineExceeded);
  EXPECT_EQ(q.error.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(queued->started(), 0);
  FinishedEvent r = running->Wait();
  EXPECT_EQ(r.reason, FinishReason::kDeadlineExceeded);
  EXPECT_EQ(running->started(), 1);
  EXPECT_GT(r.usage.completion_tokens, 0);
  EXPECT_LT(r.usage.completion_tokens, 4096 - 10);
  EXPECT_GE(r.timings.e2e_s, 0.39);
  WaitIdle(*engine);
  EXPECT_EQ(engine->kv_blocks().full_free, idle.full_free);
  EXPECT_EQ(engine->kv_blocks().swa_free, idle.swa_free);
}

TEST_F(EngineTest, QueueOverflowIsResourceExhausted) {
  EngineConfig config = Config();
  config.max_running = 1;
  config.max_queue = 2;
  std::unique_ptr<Engine> engine = MakeEngine(config);
  std::vector<std::shared_ptr<RecordingSink>> accepted;
  int refused = 0;
  for (int i = 0; i < 8; ++i) {
    auto sink = std::make_shared<RecordingSink>();
    absl::Status status = engine->Submit(Greedy("q" + std::to_string(i), Prompt(20, i), 50), sink);
    if (status.ok()) {
      accepted.push_back(sink);
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
      EXPECT_NE(status.message().find("queue is full"), absl::string_view::npos) << status;
      ++refused;
    }
  }
  // One may be running already; at most max_queue wait.
  EXPECT_LE(accepted.size(), 3u);
  EXPECT_GE(refused, 5);
  for (auto& sink : accepted) EXPECT_EQ(sink->Wait().reason, FinishReason::kLength);
}

TEST_F(EngineTest, InvalidRequestsNameTheProblem) {
  EngineConfig config = Config();
  config.ctx_size = 64;
  std::unique_ptr<Engine> engine = MakeEngine(config);
  auto sink = std::make_shared<RecordingSink>();
  GenerationRequest bad_top_p = Greedy("a", Prompt(4, 1), 4);
  bad_top_p.sampling.top_p = 1.5f;
  absl::Status status = engine->Submit(bad_top_p, sink);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("top_p"), absl::string_view::npos) << status;

  GenerationRequest bad_temperature = Greedy("b", Prompt(4, 1), 4);
  bad_temperature.sampling.temperature = -1;
  status = engine->Submit(bad_temperature, sink);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("temperature"), absl::string_view::npos) << status;

  status = engine->Submit(Greedy("c", Prompt(64, 1), 4), sink);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("prompt has 64 tokens; the context holds 64"),
            absl::string_view::npos)
      << status;

  GenerationRequest bad_logprobs = Greedy("d", Prompt(4, 1), 4);
  bad_logprobs.return_logprobs = true;
  bad_logprobs.top_logprobs = 21;
  status = engine->Submit(bad_logprobs, sink);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("top_logprobs"), absl::string_view::npos) << status;

  GenerationRequest bad_token = Greedy("e", {1, 999999}, 4);
  status = engine->Submit(bad_token, sink);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("prompt token 999999 (at index 1)"), absl::string_view::npos)
      << status;

  // Nothing reached the sink, and the engine still serves.
  EXPECT_EQ(sink->started(), 0);
  ASSERT_TRUE(engine->Submit(Greedy("ok", Prompt(4, 1), 3), sink).ok());
  EXPECT_EQ(sink->Wait().usage.completion_tokens, 3);

  engine->BeginDrain();
  status = engine->Submit(Greedy("late", Prompt(4, 1), 3), std::make_shared<RecordingSink>());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(EngineTest, RequestThatCanNeverFitIsResourceExhausted) {
  EngineConfig config = Config();
  config.kv_cache_blocks = 4;  // 64 tokens
  std::unique_ptr<Engine> engine = MakeEngine(config);
  absl::Status status =
      engine->Submit(Greedy("big", Prompt(40, 1), 100), std::make_shared<RecordingSink>());
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  status = engine->Submit(Greedy("huge", Prompt(70, 1), 1), std::make_shared<RecordingSink>());
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  // max_new_tokens 0 means "as far as the cache allows".
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(Greedy("fits", Prompt(40, 1), 0), sink).ok());
  FinishedEvent finished = sink->Wait();
  EXPECT_EQ(finished.reason, FinishReason::kLength);
  EXPECT_EQ(finished.usage.completion_tokens, 64 - 40);
}

TEST_F(EngineTest, StopStringAcrossTokenBoundaryIsCutExactly) {
  const EngineConfig config = Config();
  std::unique_ptr<Engine> engine = MakeEngine(config);
  const tokenizer::Tokenizer& tok = engine->tokenizer();
  const std::vector<int32_t> prompt = Prompt(12, 77);
  auto free_run = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(Greedy("free", prompt, 40), free_run).ok());
  free_run->Wait();
  const std::string full = free_run->text();
  const std::vector<int32_t> tokens = free_run->tokens();
  // A stop string made of the last 2 bytes of one token's text and the first 2 of the next,
  // printable ASCII, whose first occurrence is at that boundary.
  std::string stop;
  size_t offset = 0;
  for (size_t i = 0; i + 1 < tokens.size() && stop.empty(); ++i) {
    offset += tok.Decode({tokens[i]}, true).size();
    if (offset < 2 || offset + 2 > full.size()) continue;
    const std::string candidate = full.substr(offset - 2, 4);
    bool printable = true;
    for (char c : candidate) printable &= c >= 0x20 && c < 0x7f;
    if (printable && full.find(candidate) == offset - 2) stop = candidate;
  }
  ASSERT_FALSE(stop.empty()) << "no printable token boundary in: " << full;

  GenerationRequest request = Greedy("stop", prompt, 40);
  request.stop = {"never-in-this-text-\x01", stop};
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(std::move(request), sink).ok());
  FinishedEvent finished = sink->Wait();
  EXPECT_EQ(finished.reason, FinishReason::kStop);
  ASSERT_TRUE(finished.matched_stop.has_value());
  EXPECT_EQ(*finished.matched_stop, stop);
  EXPECT_EQ(sink->text(), full.substr(0, full.find(stop)));
  // Generation stopped at the token that completed the stop string.
  EXPECT_LT(sink->tokens().size(), tokens.size());
  EXPECT_EQ(finished.usage.completion_tokens, static_cast<int32_t>(sink->tokens().size()));
}

TEST_F(EngineTest, StopTokenIdEndsWithStop) {
  std::unique_ptr<Engine> engine = MakeEngine(Config());
  const std::vector<int32_t> prompt = Prompt(9, 5);
  auto free_run = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(Greedy("free", prompt, 10), free_run).ok());
  free_run->Wait();
  const std::vector<int32_t> tokens = free_run->tokens();
  ASSERT_EQ(tokens.size(), 10u);
  GenerationRequest request = Greedy("stop", prompt, 10);
  request.stop_token_ids = {tokens[4]};
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(std::move(request), sink).ok());
  FinishedEvent finished = sink->Wait();
  EXPECT_EQ(finished.reason, FinishReason::kStop);
  ASSERT_TRUE(finished.matched_token_id.has_value());
  EXPECT_EQ(*finished.matched_token_id, tokens[4]);
  const size_t first = std::find(tokens.begin(), tokens.end(), tokens[4]) - tokens.begin();
  EXPECT_EQ(sink->tokens(), std::vector<int32_t>(tokens.begin(), tokens.begin() + first + 1));
}

TEST_F(EngineTest, PreemptionUnderTinyKvBudgetKeepsGreedyOutput) {
  EngineConfig big = Config();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(Greedy("s" + std::to_string(i), Prompt(10 + 3 * i, 300 + i), 30));
  }
  std::vector<std::vector<int32_t>> expected;
  {
    std::unique_ptr<Engine> engine = MakeEngine(big);
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    for (const GenerationRequest& r : requests) {
      sinks.push_back(std::make_shared<RecordingSink>());
      ASSERT_TRUE(engine->Submit(r, sinks.back()).ok());
    }
    for (auto& sink : sinks) {
      sink->Wait();
      expected.push_back(sink->tokens());
    }
  }
  EngineConfig tiny = big;
  tiny.kv_cache_blocks = 10;  // each request needs 3-4 blocks; 8 of them need ~28
  auto observer = std::make_shared<CountingObserver>();
  tiny.observer = observer;
  std::unique_ptr<Engine> engine = MakeEngine(tiny);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (const GenerationRequest& r : requests) {
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(engine->Submit(r, sinks.back()).ok());
  }
  for (size_t i = 0; i < sinks.size(); ++i) {
    FinishedEvent finished = sinks[i]->Wait();
    EXPECT_EQ(finished.reason, FinishReason::kLength);
    EXPECT_EQ(sinks[i]->tokens(), expected[i]) << "request " << i;
    EXPECT_EQ(sinks[i]->started(), 1);
  }
  EXPECT_GT(observer->preemptions.load(), 0);
  EXPECT_EQ(observer->finished.load(), 8);
  WaitIdle(*engine);
  EXPECT_EQ(engine->kv_blocks().full_free, engine->kv_blocks().full_total);
}

TEST_F(EngineTest, StopAbortsEverythingLive) {
  EngineConfig config = Config();
  config.max_running = 1;
  std::unique_ptr<Engine> engine = MakeEngine(config);
  auto running = std::make_shared<RecordingSink>();
  auto queued = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(Greedy("a", Prompt(10, 1), 0), running).ok());
  ASSERT_TRUE(engine->Submit(Greedy("b", Prompt(10, 2), 0), queued).ok());
  ASSERT_TRUE(running->WaitForTokens(1));
  engine->Stop();
  EXPECT_EQ(running->Wait().reason, FinishReason::kAbort);
  EXPECT_EQ(queued->Wait().reason, FinishReason::kAbort);
  EXPECT_TRUE(engine->Idle());
  EXPECT_EQ(engine->Submit(Greedy("c", Prompt(4, 1), 1), running).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace stepserve::engine
