// Perplexity and KL-divergence evaluation, chunked the way llama.cpp's perplexity tool does it so
// that figures compare with published quantization tables: the text's tokens are cut into
// non-overlapping chunks of n_ctx tokens; the first token of each chunk becomes BOS when the
// vocabulary adds one; only predictions of tokens in the second half of each chunk are scored
// (logit row i predicts token i + 1 for i in [n_ctx/2, n_ctx - 1)).
#ifndef STEPSERVE_ENGINE_MODEL_PERPLEXITY_H_
#define STEPSERVE_ENGINE_MODEL_PERPLEXITY_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stepserve::model {

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int64_t max_chunks = 0;             // 0: every whole chunk in the text
  std::optional<int32_t> bos_token;   // set when the vocabulary adds BOS
  std::string save_logits_path;       // write scored log-probabilities here (see below)
  std::string kld_reference_path;     // compare against a file written by save_logits_path
};

// Evaluates one chunk: returns n_ctx rows of n_vocab logits (row i = after token i).
using ChunkLogitsFn =
    std::function<absl::Status(std::span<const int32_t> chunk, std::vector<float>* logits)>;
// Called after each chunk (chunk index, chunks total, running perplexity).
using PerplexityProgressFn = std::function<void(int64_t, int64_t, double)>;

struct PerplexityResult {
  int64_t chunks = 0;
  int64_t scored_tokens = 0;
  double perplexity = 0;
  double perplexity_stderr = 0;  // delta-method estimate from the per-token NLL variance
  // With a KL reference:
  bool has_kld = false;
  double mean_kld = 0;
  double top1_agreement = 0;  // fraction of scored rows whose argmax matches the reference
};

absl::StatusOr<PerplexityResult> EvaluatePerplexity(std::span<const int32_t> tokens,
                                                    int64_t n_vocab,
                                                    const PerplexityOptions& options,
                                                    const ChunkLogitsFn& chunk_logits,
                                                    const PerplexityProgressFn& progress = {});

// The saved-logits file: magic "SSLP", u32 version 1, i64 n_vocab, i64 n_ctx, i64 rows, then per
// scored row n_vocab float32 log-probabilities, in evaluation order.

}  // namespace stepserve::model

#endif  // STEPSERVE_ENGINE_MODEL_PERPLEXITY_H_
