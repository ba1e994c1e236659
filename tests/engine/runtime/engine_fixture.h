// Shared by the engine tests: a sink that records one request's events, an observer that counts,
// and a fixture that writes the tiny synthetic step35 model (f32 weights) once per test binary.
#ifndef STEPSERVE_TESTS_ENGINE_RUNTIME_ENGINE_FIXTURE_H_
#define STEPSERVE_TESTS_ENGINE_RUNTIME_ENGINE_FIXTURE_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/synth/make_model.h"

namespace stepserve::engine {

// Records every event of one request; the engine thread writes, the test thread reads.
class RecordingSink : public TokenSink {
 public:
  void OnStarted(const StartedEvent& event) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++started_;
    started_event_ = event;
  }
  void OnDelta(const DeltaEvent& event) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) ++after_finish_;
    deltas_.push_back(event);
    text_ += event.text;
    tokens_.insert(tokens_.end(), event.token_ids.begin(), event.token_ids.end());
  }
  void OnFinished(const FinishedEvent& event) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) ++after_finish_;
      finished_ = event;
    }
    cv_.notify_all();
  }

  // Waits for OnFinished (fails the test after 20 s).
  FinishedEvent Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const bool done =
        cv_.wait_for(lock, std::chrono::seconds(20), [&] { return finished_.has_value(); });
    EXPECT_TRUE(done) << "request did not finish";
    if (!finished_.has_value()) {
      FinishedEvent timed_out;
      timed_out.reason = FinishReason::kError;
      return timed_out;
    }
    return *finished_;
  }
  bool WaitForTokens(size_t n) {
    for (int i = 0; i < 20000; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (tokens_.size() >= n) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
  int started() const {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }
  StartedEvent started_event() const {
    std::lock_guard<std::mutex> lock(mu_);
    return started_event_;
  }
  int after_finish() const {
    std::lock_guard<std::mutex> lock(mu_);
    return after_finish_;
  }
  std::string text() const {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }
  std::vector<int32_t> tokens() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_;
  }
  std::vector<DeltaEvent> deltas() const {
    std::lock_guard<std::mutex> lock(mu_);
    return deltas_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int started_ = 0;
  int after_finish_ = 0;
  StartedEvent started_event_;
  std::vector<DeltaEvent> deltas_;
  std::string text_;
  std::vector<int32_t> tokens_;
  std::optional<FinishedEvent> finished_;
};

class CountingObserver : public EngineObserver {
 public:
  void OnPreemption() override { ++preemptions; }
  void OnStep(const StepStats& stats) override {
    ++steps;
    max_seqs = std::max(max_seqs.load(), stats.num_seqs);
  }
  void OnRequestFinished(const RequestFinishedStats&) override { ++finished; }
  std::atomic<int> preemptions{0}, steps{0}, finished{0}, max_seqs{0};
};

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_path_ = new std::string(
        (std::filesystem::temp_directory_path() / "stepserve_engine_test_tiny_f32.gguf").string());
    synth::MakeModelOptions options;
    options.preset = "tiny";
    options.out = *model_path_;
    options.seed = 7;
    options.recipe = "f32";
    options.threads = 2;
    auto written = synth::MakeModel(options, nullptr);
    ASSERT_TRUE(written.ok()) << written.status();
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(*model_path_);
    delete model_path_;
  }

  static EngineConfig Config() {
    EngineConfig config;
    config.model_path = *model_path_;
    config.threads = 2;
    config.ctx_size = 512;
    config.kv_cache_blocks = 256;
    config.max_running = 16;
    config.max_step_tokens = 256;
    config.max_queue = 64;
    return config;
  }
  static std::unique_ptr<Engine> MakeEngine(const EngineConfig& config) {
    auto engine = Engine::Create(config);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return nullptr;
    EXPECT_TRUE((*engine)->Start().ok());
    return *std::move(engine);
  }

  static std::vector<int32_t> Prompt(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> tokens(n);
    // Ordinary tokens only (above the specials at the start of the synthetic vocabulary).
    for (int32_t& t : tokens) t = 300 + static_cast<int32_t>(rng() % 1800);
    return tokens;
  }
  static GenerationRequest Greedy(std::string id, std::vector<int32_t> prompt, int64_t max_new) {
    GenerationRequest request;
    request.request_id = std::move(id);
    request.prompt = std::move(prompt);
    request.sampling.temperature = 0;
    request.seed = 1;
    request.max_new_tokens = max_new;
    request.ignore_eos = true;
    return request;
  }
  static void WaitIdle(const Engine& engine) {
    for (int i = 0; i < 20000 && !engine.Idle(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(engine.Idle());
  }
  // Generates alone on a fresh engine and returns the tokens.
  static std::vector<int32_t> RunAlone(const EngineConfig& config, GenerationRequest request) {
    std::unique_ptr<Engine> engine = MakeEngine(config);
    auto sink = std::make_shared<RecordingSink>();
    EXPECT_TRUE(engine->Submit(std::move(request), sink).ok());
    sink->Wait();
    return sink->tokens();
  }

  static inline std::string* model_path_ = nullptr;
};

}  // namespace stepserve::engine

#endif  // STEPSERVE_TESTS_ENGINE_RUNTIME_ENGINE_FIXTURE_H_
