// End-to-end throughput of the engine loop: N concurrent greedy requests (prompt P tokens, D new
// tokens each) through Submit → continuous batching → sinks, on the CPU backend. One JSON object
// per concurrency level. Usage: bench_engine_loop [MODEL.gguf] (default: a tiny synthetic f32
// model written to a temp file and removed afterwards).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/synth/make_model.h"

namespace stepserve::engine {
namespace {

using Clock = std::chrono::steady_clock;

class Sink : public TokenSink {
 public:
  void OnStarted(const StartedEvent&) override {}
  void OnDelta(const DeltaEvent&) override {}
  void OnFinished(const FinishedEvent& event) override {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = event;
    cv_.notify_all();
  }
  FinishedEvent Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return finished_.has_value(); });
    return *finished_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<FinishedEvent> finished_;
};

class StepCounter : public EngineObserver {
 public:
  void OnStep(const StepStats& stats) override {
    ++steps;
    forward_us += static_cast<int64_t>(stats.forward_s * 1e6);
    overhead_us += static_cast<int64_t>((stats.total_s - stats.forward_s) * 1e6);
  }
  std::atomic<int64_t> steps{0}, forward_us{0}, overhead_us{0};
};

int Main(int argc, char** argv) {
  std::string path;
  bool temp = false;
  if (argc > 1) {
    path = argv[1];
  } else {
    path = (std::filesystem::temp_directory_path() / "stepserve_bench_engine_loop.gguf").string();
    synth::MakeModelOptions options;
    options.preset = "tiny";
    options.out = path;
    options.seed = 3;
    options.recipe = "f32";
    auto written = synth::MakeModel(options, nullptr);
    if (!written.ok()) {
      std::fprintf(stderr, "make-model: %s\n", std::string(written.status().message()).c_str());
      return 1;
    }
    temp = true;
  }
  const int prompt_tokens = 64, new_tokens = 32;
  for (int concurrency : {1, 8, 32}) {
    EngineConfig config;
    config.model_path = path;
    config.ctx_size = 1024;
    config.kv_cache_blocks = 1024;
    config.max_running = 64;
    config.max_step_tokens = 512;
    auto counter = std::make_shared<StepCounter>();
    config.observer = counter;
    auto engine = Engine::Create(config);
    if (!engine.ok() || !(*engine)->Start().ok()) {
      std::fprintf(stderr, "engine: %s\n", std::string(engine.status().message()).c_str());
      return 1;
    }
    const int64_t vocab = (*engine)->model_info().vocab_size;
    std::mt19937 rng(concurrency);
    std::vector<std::shared_ptr<Sink>> sinks;
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < concurrency; ++i) {
      GenerationRequest request;
      request.request_id = "b" + std::to_string(i);
      for (int t = 0; t < prompt_tokens; ++t) {
        request.prompt.push_back(static_cast<int32_t>(rng() % vocab));
      }
      request.sampling.temperature = 0;
      request.seed = 1;
      request.max_new_tokens = new_tokens;
      request.ignore_eos = true;
      sinks.push_back(std::make_shared<Sink>());
      if (absl::Status s = (*engine)->Submit(std::move(request), sinks.back()); !s.ok()) {
        std::fprintf(stderr, "submit: %s\n", std::string(s.message()).c_str());
        return 1;
      }
    }
    double ttft = 0, e2e = 0;
    int64_t generated = 0;
    for (auto& sink : sinks) {
      const FinishedEvent f = sink->Wait();
      ttft += f.timings.ttft_s;
      e2e += f.timings.e2e_s;
      generated += f.usage.completion_tokens;
    }
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf(
        "{\"bench\":\"engine_loop\",\"model\":\"%s\",\"concurrency\":%d,\"prompt_tokens\":%d,"
        "\"new_tokens\":%d,\"wall_s\":%.4f,\"output_tok_per_s\":%.1f,\"total_tok_per_s\":%.1f,"
        "\"mean_ttft_s\":%.4f,\"mean_e2e_s\":%.4f,\"steps\":%lld,\"forward_frac\":%.3f}\n",
        temp ? "tiny-f32" : path.c_str(), concurrency, prompt_tokens, new_tokens, wall,
        generated / wall, (generated + int64_t{concurrency} * prompt_tokens) / wall,
        ttft / concurrency, e2e / concurrency, static_cast<long long>(counter->steps.load()),
        counter->forward_us.load() /
            std::max(1.0, static_cast<double>(counter->forward_us + counter->overhead_us)));
    std::fflush(stdout);
  }
  if (temp) std::filesystem::remove(path);
  return 0;
}

}  // namespace
}  // namespace stepserve::engine

int main(int argc, char** argv) { return stepserve::engine::Main(argc, argv); }
