#include "engine/model/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"

namespace stepserve::model {
namespace {

constexpr char kMagic[4] = {'S', 'S', 'L', 'P'};
constexpr uint32_t kVersion = 1;

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<FILE, FileCloser>;

// log-softmax of one row, in double for the normaliser.
void LogSoftmax(const float* logits, int64_t n, std::vector<float>* out) {
  float max_logit = logits[0];
  for (int64_t i = 1; i < n; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - max_logit));
  const double log_z = std::log(sum) + max_logit;
  out->resize(n);
  for (int64_t i = 0; i < n; ++i) (*out)[i] = static_cast<float>(logits[i] - log_z);
}

struct Header {
  int64_t n_vocab = 0, n_ctx = 0, rows = 0;
};

absl::Status WriteHeader(FILE* f, const Header& h, const std::string& path) {
  if (std::fwrite(kMagic, 1, 4, f) != 4 || std::fwrite(&kVersion, 4, 1, f) != 1 ||
      std::fwrite(&h.n_vocab, 8, 1, f) != 1 || std::fwrite(&h.n_ctx, 8, 1, f) != 1 ||
      std::fwrite(&h.rows, 8, 1, f) != 1) {
    return absl::DataLossError(absl::StrFormat("%s: write failed", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<Header> ReadHeader(FILE* f, const std::string& path) {
  char magic[4];
  uint32_t version = 0;
  Header h;
  if (std::fread(magic, 1, 4, f) != 4 || std::memcmp(magic, kMagic, 4) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not a stepserve saved-logits file (bad magic)", path));
  }
  if (std::fread(&version, 4, 1, f) != 1 || version != kVersion) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: unsupported version", path));
  }
  if (std::fread(&h.n_vocab, 8, 1, f) != 1 || std::fread(&h.n_ctx, 8, 1, f) != 1 ||
      std::fread(&h.rows, 8, 1, f) != 1) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: truncated header", path));
  }
  return h;
}

}  // namespace

absl::StatusOr<PerplexityResult> EvaluatePerplexity(std::span<const int32_t> tokens,
                                                    int64_t n_vocab,
                                                    const PerplexityOptions& options,
                                                    const ChunkLogitsFn& chunk_logits,
                                                    const PerplexityProgressFn& progress) {
  const int64_t n_ctx = options.n_ctx;
  if (n_ctx < 4) {
    return absl::InvalidArgumentError(absl::StrFormat("--ctx must be at least 4, got %d", n_ctx));
  }
  int64_t chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
  if (chunks == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the text has %d tokens; at least one chunk of --ctx %d is needed", tokens.size(), n_ctx));
  }
  if (options.max_chunks > 0) chunks = std::min(chunks, options.max_chunks);
  const int64_t first = n_ctx / 2;
  const int64_t rows_per_chunk = n_ctx - 1 - first;

  File save, reference;
  Header ref_header;
  if (!options.save_logits_path.empty()) {
    save.reset(std::fopen(options.save_logits_path.c_str(), "wb"));
    if (!save) {
      return absl::InvalidArgumentError(
          absl::StrFormat("cannot create %s: %s", options.save_logits_path, std::strerror(errno)));
    }
    absl::Status status = WriteHeader(save.get(), {n_vocab, n_ctx, chunks * rows_per_chunk},
                                      options.save_logits_path);
    if (!status.ok()) return status;
  }
  if (!options.kld_reference_path.empty()) {
    reference.reset(std::fopen(options.kld_reference_path.c_str(), "rb"));
    if (!reference) {
      return absl::InvalidArgumentError(
          absl::StrFormat("cannot open %s: %s", options.kld_reference_path, std::strerror(errno)));
    }
    absl::StatusOr<Header> header = ReadHeader(reference.get(), options.kld_reference_path);
    if (!header.ok()) return header.status();
    ref_header = *header;
    if (ref_header.n_vocab != n_vocab || ref_header.n_ctx != n_ctx ||
        ref_header.rows < chunks * rows_per_chunk) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s was saved with vocab %d, ctx %d, %d rows; this run has vocab %d, ctx %d and needs "
          "%d rows",
          options.kld_reference_path, ref_header.n_vocab, ref_header.n_ctx, ref_header.rows,
          n_vocab, n_ctx, chunks * rows_per_chunk));
    }
  }

  PerplexityResult result;
  result.has_kld = reference != nullptr;
  double nll_sum = 0, nll_sq_sum = 0, kld_sum = 0;
  int64_t top1_matches = 0;
  std::vector<int32_t> chunk(n_ctx);
  std::vector<float> logits, log_probs, ref_log_probs(result.has_kld ? n_vocab : 0);
  for (int64_t c = 0; c < chunks; ++c) {
    std::copy_n(tokens.begin() + c * n_ctx, n_ctx, chunk.begin());
    if (options.bos_token) chunk[0] = *options.bos_token;
    logits.clear();
    if (absl::Status status = chunk_logits(chunk, &logits); !status.ok()) return status;
    if (static_cast<int64_t>(logits.size()) != n_ctx * n_vocab) {
      return absl::InternalError(
          absl::StrFormat("chunk %d: the model returned %d logits, expected %d", c, logits.size(),
                          n_ctx * n_vocab));
    }
    for (int64_t i = first; i < n_ctx - 1; ++i) {
      LogSoftmax(logits.data() + i * n_vocab, n_vocab, &log_probs);
      const int32_t target = tokens[c * n_ctx + i + 1];
      if (target < 0 || target >= n_vocab) {
        return absl::InvalidArgumentError(absl::StrFormat("token %d out of range", target));
      }
      const double nll = -static_cast<double>(log_probs[target]);
      nll_sum += nll;
      nll_sq_sum += nll * nll;
      ++result.scored_tokens;
      if (save && std::fwrite(log_probs.data(), sizeof(float), n_vocab, save.get()) !=
                      static_cast<size_t>(n_vocab)) {
        return absl::DataLossError(absl::StrFormat("%s: write failed", options.save_logits_path));
      }
      if (reference) {
        if (std::fread(ref_log_probs.data(), sizeof(float), n_vocab, reference.get()) !=
            static_cast<size_t>(n_vocab)) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: truncated", options.kld_reference_path));
        }
        double kld = 0;
        int64_t ref_best = 0, best = 0;
        for (int64_t v = 0; v < n_vocab; ++v) {
          const double p = std::exp(static_cast<double>(ref_log_probs[v]));
          kld += p * (static_cast<double>(ref_log_probs[v]) - log_probs[v]);
          if (ref_log_probs[v] > ref_log_probs[ref_best]) ref_best = v;
          if (log_probs[v] > log_probs[best]) best = v;
        }
        kld_sum += kld;
        top1_matches += best == ref_best;
      }
    }
    ++result.chunks;
    if (progress) progress(c + 1, chunks, std::exp(nll_sum / result.scored_tokens));
  }
  const double n = static_cast<double>(result.scored_tokens);
  const double mean = nll_sum / n;
  result.perplexity = std::exp(mean);
  const double variance = std::max(0.0, nll_sq_sum / n - mean * mean);
  result.perplexity_stderr = result.perplexity * std::sqrt(variance / std::max(1.0, n - 1));
  if (result.has_kld) {
    result.mean_kld = kld_sum / n;
    result.top1_agreement = static_cast<double>(top1_matches) / n;
  }
  return result;
}

}  // namespace stepserve::model
