// Time per Sampler::Sample over a Step-sized vocabulary (128896) for typical parameter sets.
// Prints one JSON object per configuration: median and p90 microseconds per call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"

namespace {

using stepserve::Sampler;
using stepserve::SamplingParams;

struct Config {
  std::string name;
  SamplingParams params;
};

}  // namespace

int main() {
  constexpr int kVocab = 128896;
  constexpr int kRows = 16;
  constexpr int kIters = 200;
  std::mt19937_64 rng(1);
  // Model logits are roughly normal with a few-unit spread; rows differ so caches do not help.
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(size_t(kRows) * kVocab);
  for (float& v : logits) v = normal(rng);

  std::vector<Config> configs;
  auto add = [&](std::string name, auto mutate) {
    SamplingParams p;
    p.seed = 1;
    mutate(p);
    configs.push_back({std::move(name), p});
  };
  add("greedy", [](SamplingParams& p) { p.temperature = 0.0f; });
  add("temperature_only", [](SamplingParams& p) { p.temperature = 0.8f; });
  add("top_k40_top_p0.95", [](SamplingParams& p) {
    p.top_k = 40;
    p.top_p = 0.95f;
  });
  add("top_p0.9", [](SamplingParams& p) { p.top_p = 0.9f; });
  add("min_p0.05", [](SamplingParams& p) { p.min_p = 0.05f; });
  add("top_k40_rep1.1_last64_logprobs5", [](SamplingParams& p) {
    p.top_k = 40;
    p.repetition_penalty = 1.1f;
    p.n_logprobs = 5;
  });

  std::vector<int32_t> prompt(512);
  for (int32_t& t : prompt) t = int32_t(rng() % kVocab);
  for (const Config& c : configs) {
    absl::StatusOr<Sampler> sampler = Sampler::Create(c.params, kVocab, prompt);
    if (!sampler.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), sampler.status().ToString().c_str());
      return 1;
    }
    std::vector<double> us;
    us.reserve(kIters);
    for (int i = 0; i < kIters; ++i) {
      std::span<const float> row(logits.data() + size_t(i % kRows) * kVocab, kVocab);
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<stepserve::SampleResult> r = sampler->Sample(row);
      const auto end = std::chrono::steady_clock::now();
      if (!r.ok()) return 1;
      us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
    std::sort(us.begin(), us.end());
    std::printf(
        "{\"bench\":\"sampler_sample\",\"config\":\"%s\",\"vocab\":%d,\"iters\":%d,"
        "\"us_median\":%.1f,\"us_p90\":%.1f}\n",
        c.name.c_str(), kVocab, kIters, us[us.size() / 2], us[us.size() * 9 / 10]);
  }
  return 0;
}
