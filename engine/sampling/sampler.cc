#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/sampling/counter_rng.h"

namespace stepserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The ranking every truncation uses: larger logit first, ties to the lower token id, so the kept
// set is a well-defined prefix whatever selection algorithm produced it.
template <typename C>
bool Better(const C& a, const C& b) {
  return a.z > b.z || (a.z == b.z && a.id < b.id);
}

}  // namespace

Sampler::Sampler(SamplingParams params, int vocab_size)
    : params_(std::move(params)),
      vocab_size_(vocab_size),
      log_min_p_(params_.min_p > 0.0f ? std::log(params_.min_p) : kNegInf),
      history_(params_.HasPenalties() ? params_.penalty_last_n : 0) {
  z_.resize(vocab_size_);
  cand_.reserve(vocab_size_);
}

absl::StatusOr<Sampler> Sampler::Create(SamplingParams params, int vocab_size,
                                        std::span<const int32_t> prompt) {
  if (absl::Status status = params.Validate(vocab_size); !status.ok()) return status;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "prompt[%d] = %d is not a token id in [0, %d)", i, prompt[i], vocab_size));
    }
  }
  Sampler sampler(std::move(params), vocab_size);
  for (int32_t token : prompt) sampler.history_.Push(token);
  return sampler;
}

absl::Status Sampler::Accept(int32_t token) {
  if (token < 0 || token >= vocab_size_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("accepted token %d is not in [0, %d)", token, vocab_size_));
  }
  history_.Push(token);
  ++generation_index_;
  return absl::OkStatus();
}

void Sampler::ApplyBiasAndPenalties() {
  for (const auto& [token, bias] : params_.logit_bias) z_[token] += bias;
  if (history_.counts().empty()) return;
  const float rep = params_.repetition_penalty;
  const float presence = params_.presence_penalty;
  const float frequency = params_.frequency_penalty;
  for (const auto& [token, count] : history_.counts()) {
    float z = z_[token];
    if (rep != 1.0f) z = z > 0.0f ? z / rep : z * rep;
    z -= static_cast<float>(count) * frequency + presence;
    z_[token] = z;
  }
}

absl::Status Sampler::Prepare(std::span<const float> logits) {
  if (logits.size() != static_cast<size_t>(vocab_size_)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "logits has %d entries, expected vocab_size %d", logits.size(), vocab_size_));
  }
  const float* in = logits.data();
  float* z = z_.data();
  for (int32_t i = 0; i < vocab_size_; ++i) {
    const float x = in[i];
    // -inf is a legitimate mask (padded vocabulary rows); NaN and +inf mean a broken forward.
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("logits[%d] is %g; the model produced a non-finite logit", i, x));
    }
    z[i] = x;
  }
  ApplyBiasAndPenalties();

  full_vocab_ = false;
  cand_.clear();
  sorted_ = 0;
  if (params_.IsGreedy()) {
    greedy_token_ = Argmax(z_);
    if (!(z_[greedy_token_] > kNegInf)) {
      return absl::InvalidArgumentError(
          "no token can be sampled: every logit is -inf after logit_bias and penalties");
    }
    return absl::OkStatus();
  }
  greedy_token_ = -1;
  const float temperature = params_.temperature;
  float max_z = kNegInf;
  int32_t n_finite = 0;
  for (int32_t i = 0; i < vocab_size_; ++i) {
    const float v = z[i] / temperature;
    z[i] = v;
    max_z = std::max(max_z, v);
    n_finite += v > kNegInf;
  }
  if (!(max_z > kNegInf)) {
    return absl::InvalidArgumentError(
        "no token can be sampled: every logit is -inf after logit_bias and penalties");
  }
  max_z_ = max_z;
  Truncate(n_finite);
  return absl::OkStatus();
}

void Sampler::SortPrefix(size_t need) {
  need = std::min(need, cand_.size());
  if (need <= sorted_) return;
  auto first = cand_.begin() + sorted_;
  auto nth = cand_.begin() + need;
  if (nth != cand_.end()) std::nth_element(first, nth, cand_.end(), Better<Candidate>);
  std::sort(first, nth, Better<Candidate>);
  sorted_ = need;
}

void Sampler::Truncate(int32_t n_finite) {
  const bool top_k_on = params_.top_k > 0 && params_.top_k < n_finite;
  const bool top_p_on = params_.top_p < 1.0f;
  const bool min_p_on = params_.min_p > 0.0f;
  const float max_z = max_z_;
  if (!top_k_on && !top_p_on && !min_p_on) {
    // No truncation: the weights overwrite z_ and the draw walks the whole vocabulary.
    full_vocab_ = true;
    double total = 0.0;
    for (float& v : z_) {
      v = std::exp(v - max_z);  // exp(-inf) = 0 for banned tokens
      total += v;
    }
    weight_total_ = total;
    return;
  }

  // min-p keeps p >= min_p * p_max, i.e. z >= max_z + log(min_p). Top-k and top-p keep prefixes of
  // the same ranking and always keep the top token, so the min-p survivors bound the final set
  // from the start; only the top-p mass must still be measured over the unfiltered top-k set.
  const float threshold = max_z + log_min_p_;
  double norm = 0.0;  // the mass top-p is a fraction of
  if (top_k_on) {
    for (int32_t i = 0; i < vocab_size_; ++i) {
      if (z_[i] > kNegInf) cand_.push_back({z_[i], i});
    }
    std::nth_element(cand_.begin(), cand_.begin() + params_.top_k, cand_.end(), Better<Candidate>);
    cand_.resize(params_.top_k);
    if (top_p_on) {
      for (const Candidate& c : cand_) norm += std::exp(c.z - max_z);
    }
    if (min_p_on) {
      std::erase_if(cand_, [threshold](const Candidate& c) { return c.z < threshold; });
    }
  } else {
    for (int32_t i = 0; i < vocab_size_; ++i) {
      const float v = z_[i];
      if (!(v > kNegInf)) continue;
      if (top_p_on) norm += std::exp(v - max_z);
      if (v >= threshold) cand_.push_back({v, i});
    }
  }

  if (top_p_on) {
    // Smallest best-first prefix whose mass reaches top_p. Sorting grows in chunks so a peaked
    // distribution sorts a few dozen candidates, not the vocabulary.
    const double target = static_cast<double>(params_.top_p) * norm;
    double cumulative = 0.0;
    size_t keep = cand_.size();
    for (size_t i = 0; i < cand_.size(); ++i) {
      if (i == sorted_) SortPrefix(std::max<size_t>(64, sorted_ * 4));
      cumulative += std::exp(cand_[i].z - max_z);
      if (cumulative >= target) {
        keep = i + 1;
        break;
      }
    }
    cand_.resize(keep);
  }

  // Canonical draw order: ascending token id, weights summed in that order.
  std::sort(cand_.begin(), cand_.end(),
            [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  double total = 0.0;
  for (Candidate& c : cand_) {
    c.z = std::exp(c.z - max_z);
    total += c.z;
  }
  weight_total_ = total;
}

absl::StatusOr<SampleResult> Sampler::SampleAt(std::span<const float> logits, uint64_t index) {
  if (absl::Status status = Prepare(logits); !status.ok()) return status;
  SampleResult result;
  if (greedy_token_ >= 0) {
    result.token = greedy_token_;
  } else {
    const double u = CounterUniform(params_.seed, index, RngStream::kSample);
    if (full_vocab_) {
      result.token = InverseCdf(z_, weight_total_, u);
    } else {
      const double target = u * weight_total_;
      double running = 0.0;
      result.token = cand_.back().id;  // rounding left the target unreached
      for (const Candidate& c : cand_) {
        running += c.z;
        if (running > target) {
          result.token = c.id;
          break;
        }
      }
    }
  }
  const double log_norm = LogSumExp(logits);
  result.logprob = static_cast<float>(logits[result.token] - log_norm);
  result.n_top = TopLogprobs(logits, log_norm, params_.n_logprobs, result.top.data());
  return result;
}

bool Sampler::CandidatesSuffice(int32_t k) const {
  return params_.IsGreedy() && params_.logit_bias.empty() && !params_.HasPenalties() &&
         params_.n_logprobs <= k;
}

absl::StatusOr<SampleResult> Sampler::SampleFromCandidates(std::span<const int32_t> ids,
                                                           std::span<const float> values,
                                                           int32_t argmax, float log_sum_exp) {
  if (!CandidatesSuffice(static_cast<int32_t>(ids.size())) || ids.size() != values.size() ||
      ids.empty()) {
    return absl::FailedPreconditionError(
        "SampleFromCandidates: these sampling params need the full logits row");
  }
  if (argmax < 0 || argmax >= vocab_size_ || ids[0] != argmax) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SampleFromCandidates: argmax %d does not lead the candidates (first %d)", argmax, ids[0]));
  }
  if (!(values[0] > kNegInf)) {
    return absl::InvalidArgumentError(
        "no token can be sampled: every logit is -inf after logit_bias and penalties");
  }
  if (!std::isfinite(log_sum_exp) || !std::isfinite(values[0])) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the model produced a non-finite logit (log-sum-exp %g)", log_sum_exp));
  }
  SampleResult result;
  result.token = argmax;
  result.logprob = values[0] - log_sum_exp;
  result.n_top = std::min<int32_t>(params_.n_logprobs, static_cast<int32_t>(ids.size()));
  for (int32_t j = 0; j < result.n_top; ++j) {
    result.top[j] = {ids[j], values[j] - log_sum_exp};
  }
  if (absl::Status status = Accept(result.token); !status.ok()) return status;
  return result;
}

absl::StatusOr<SampleResult> Sampler::Sample(std::span<const float> logits) {
  absl::StatusOr<SampleResult> result = SampleAt(logits, generation_index_);
  if (!result.ok()) return result;
  if (absl::Status status = Accept(result->token); !status.ok()) return status;
  return result;
}

absl::Status Sampler::Distribution(std::span<const float> logits, std::span<float> probs) {
  if (probs.size() != static_cast<size_t>(vocab_size_)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("probs has %d entries, expected vocab_size %d", probs.size(), vocab_size_));
  }
  if (absl::Status status = Prepare(logits); !status.ok()) return status;
  if (greedy_token_ >= 0) {
    std::fill(probs.begin(), probs.end(), 0.0f);
    probs[greedy_token_] = 1.0f;
  } else if (full_vocab_) {
    for (int32_t i = 0; i < vocab_size_; ++i) {
      probs[i] = static_cast<float>(z_[i] / weight_total_);
    }
  } else {
    std::fill(probs.begin(), probs.end(), 0.0f);
    for (const Candidate& c : cand_) probs[c.id] = static_cast<float>(c.z / weight_total_);
  }
  return absl::OkStatus();
}

absl::Status SampleBatch(std::span<Sampler* const> samplers, std::span<const float> logits,
                         std::span<SampleResult> out) {
  if (out.size() != samplers.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "out has %d rows, expected one per sampler (%d)", out.size(), samplers.size()));
  }
  if (samplers.empty()) {
    return logits.empty() ? absl::OkStatus()
                          : absl::InvalidArgumentError("logits given for an empty batch");
  }
  for (size_t r = 0; r < samplers.size(); ++r) {
    if (samplers[r] == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("samplers[%d] is null", r));
    }
  }
  const size_t vocab = samplers[0]->vocab_size();
  if (logits.size() != samplers.size() * vocab) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logits has %d entries, expected rows (%d) * vocab_size (%d)",
                        logits.size(), samplers.size(), vocab));
  }
  for (size_t r = 0; r < samplers.size(); ++r) {
    if (static_cast<size_t>(samplers[r]->vocab_size()) != vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "samplers[%d] has vocab_size %d, row width is %d", r, samplers[r]->vocab_size(), vocab));
    }
    absl::StatusOr<SampleResult> result = samplers[r]->Sample(logits.subspan(r * vocab, vocab));
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrCat("row ", r, ": ", result.status().message()));
    }
    out[r] = *result;
  }
  return absl::OkStatus();
}

}  // namespace stepserve
