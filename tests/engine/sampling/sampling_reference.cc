#include "tests/engine/sampling/sampling_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace stepserve::testing {

std::vector<double> ReferencePenalised(const std::vector<float>& logits,
                                       const SamplingParams& params,
                                       const std::vector<int32_t>& history) {
  std::vector<double> z(logits.begin(), logits.end());
  for (const auto& [token, bias] : params.logit_bias) z[token] += bias;
  size_t begin = 0;
  if (params.penalty_last_n == 0) {
    begin = history.size();
  } else if (params.penalty_last_n > 0 && history.size() > size_t(params.penalty_last_n)) {
    begin = history.size() - params.penalty_last_n;
  }
  std::map<int32_t, int> counts;
  for (size_t i = begin; i < history.size(); ++i) ++counts[history[i]];
  for (const auto& [token, count] : counts) {
    double v = z[token];
    const double r = params.repetition_penalty;
    v = v > 0 ? v / r : v * r;
    v -= count * double(params.frequency_penalty) + double(params.presence_penalty);
    z[token] = v;
  }
  return z;
}

std::vector<double> ReferenceDistribution(const std::vector<float>& logits,
                                          const SamplingParams& params,
                                          const std::vector<int32_t>& history) {
  const int n = static_cast<int>(logits.size());
  std::vector<double> z = ReferencePenalised(logits, params, history);
  std::vector<double> out(n, 0.0);
  std::vector<int> order;
  for (int i = 0; i < n; ++i) {
    if (z[i] > -std::numeric_limits<double>::infinity()) order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  if (params.IsGreedy()) {
    out[order[0]] = 1.0;
    return out;
  }
  for (double& v : z) v /= params.temperature;
  const double max = z[order[0]];
  auto weight = [&](int i) { return std::exp(z[i] - max); };
  if (params.top_k > 0 && size_t(params.top_k) < order.size()) order.resize(params.top_k);
  if (params.top_p < 1.0f) {
    double total = 0;
    for (int i : order) total += weight(i);
    double cumulative = 0;
    size_t keep = order.size();
    for (size_t j = 0; j < order.size(); ++j) {
      cumulative += weight(order[j]) / total;
      if (cumulative >= params.top_p) {
        keep = j + 1;
        break;
      }
    }
    order.resize(keep);
  }
  if (params.min_p > 0.0f) {
    std::erase_if(order, [&](int i) { return weight(i) < params.min_p; });  // p_max weight is 1
  }
  double total = 0;
  for (int i : order) total += weight(i);
  for (int i : order) out[i] = weight(i) / total;
  return out;
}

std::vector<float> RandomLogits(std::mt19937_64& rng, int vocab, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(vocab);
  for (float& v : logits) v = normal(rng);
  return logits;
}

}  // namespace stepserve::testing
