#include "engine/runner/kv_context.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "engine/base/check.h"
#include "engine/base/status_macros.h"

namespace stepserve::runner {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::StatusOr<std::unique_ptr<KvContext>> KvContext::Create(Backend& backend,
                                                             const model::Hparams& hparams,
                                                             const KvContextOptions& options) {
  if (options.max_sequences < 1 || options.ctx_size < 1 || options.block_size < 1 ||
      options.max_chunk < 1 || options.rollback_slack < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV context: %d sequences, ctx size %d, block size %d, max chunk %d, rollback slack %d "
        "(all must be positive, the slack non-negative)",
        options.max_sequences, options.ctx_size, options.block_size, options.max_chunk,
        options.rollback_slack));
  }
  const int end_layer = options.include_mtp_layers ? hparams.n_layer_all : hparams.n_layer;
  bool has_full = false, has_swa = false;
  for (int il = 0; il < end_layer; ++il) {
    (hparams.layers[il].is_swa ? has_swa : has_full) = true;
  }
  std::unique_ptr<KvContext> ctx(new KvContext(options));
  const int64_t per_seq_full = CeilDiv(options.ctx_size, options.block_size);
  // A sliding table holds at most the blocks covering (oldest visible query - W + 1) through the
  // end of the current chunk; the oldest visible query trails by the previous chunk plus slack.
  // One extra block on each side covers partial blocks.
  const int64_t window = has_swa ? std::max(hparams.sliding_window, 1) : 0;
  const int64_t per_seq_swa =
      has_swa ? std::min(per_seq_full,
                         CeilDiv(window + options.rollback_slack + 2 * int64_t{options.max_chunk},
                                 options.block_size) +
                             2)
              : 0;
  const int64_t full_blocks = has_full ? per_seq_full * options.max_sequences : 0;
  const int64_t swa_blocks = per_seq_swa * options.max_sequences;
  if (full_blocks > INT32_MAX || swa_blocks > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV context: %d sequences of %d positions need more than 2^31 blocks",
                        options.max_sequences, options.ctx_size));
  }
  ctx->full_pool_ = std::make_unique<kv::BlockPool>(static_cast<int32_t>(full_blocks));
  ctx->swa_pool_ = std::make_unique<kv::BlockPool>(static_cast<int32_t>(swa_blocks));
  kv::KvGeometry geometry{.block_size = options.block_size,
                          .sliding_window = has_swa ? static_cast<int32_t>(window) : 0,
                          .rollback_slack = options.rollback_slack,
                          .has_full_layers = has_full};
  for (int s = 0; s < options.max_sequences; ++s) {
    ctx->sequences_.push_back(std::make_unique<kv::SequenceBlocks>(geometry, ctx->full_pool_.get(),
                                                                   ctx->swa_pool_.get()));
  }
  ASSIGN_OR_RETURN(model::KvStorage storage,
                   model::KvStorage::Create(backend, hparams,
                                            {.dtype = options.kv_dtype,
                                             .block_size = options.block_size,
                                             .full_blocks = static_cast<int32_t>(full_blocks),
                                             .swa_blocks = static_cast<int32_t>(swa_blocks),
                                             .first_layer = 0,
                                             .end_layer = end_layer}));
  ctx->storage_ = std::make_unique<model::KvStorage>(std::move(storage));
  return ctx;
}

absl::StatusOr<model::BatchSequence> KvContext::Append(int seq, std::span<const int32_t> tokens,
                                                       int32_t logit_rows) {
  STEPSERVE_CHECK(seq >= 0 && seq < options_.max_sequences, "sequence index out of range");
  kv::SequenceBlocks& blocks = *sequences_[seq];
  const int64_t count = static_cast<int64_t>(tokens.size());
  if (count == 0 || count > options_.max_chunk) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sequence %d: a chunk of %d tokens (must be 1..%d)", seq, count, options_.max_chunk));
  }
  const int64_t start = blocks.length();
  if (start + count > options_.ctx_size) {
    return absl::OutOfRangeError(
        absl::StrFormat("sequence %d: %d + %d positions exceed the context size %d", seq, start,
                        count, options_.ctx_size));
  }
  if (!blocks.Grow(start + count)) {
    // The pools are sized for every sequence at ctx_size, so this is a sizing bug.
    return absl::InternalError(absl::StrFormat(
        "sequence %d: KV pools exhausted growing to %d positions (full %d free, sliding %d free)",
        seq, start + count, full_pool_->num_free(), swa_pool_->num_free()));
  }
  return model::BatchSequence{.tokens = tokens,
                              .start_pos = start,
                              .full_table = blocks.full_table(),
                              .swa_table = blocks.swa_table(),
                              .logit_rows = logit_rows};
}

void KvContext::Truncate(int seq, int64_t length) {
  STEPSERVE_CHECK(seq >= 0 && seq < options_.max_sequences, "sequence index out of range");
  sequences_[seq]->Truncate(length);
}

void KvContext::Reset(int seq) {
  STEPSERVE_CHECK(seq >= 0 && seq < options_.max_sequences, "sequence index out of range");
  sequences_[seq]->Clear();
}

}  // namespace stepserve::runner
