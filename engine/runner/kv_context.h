// KV cache for a fixed set of sequences without a scheduler: KvStorage on the model's backend plus
// the block pools and per-sequence block tables (engine/kv) sized so that every sequence can
// reach `ctx_size` positions at once. Used by `stepserve generate`, `stepserve eval` and the CPU
// benchmarks.
//
//   ASSIGN_OR_RETURN(auto kv, KvContext::Create(model.backend(), model.hparams(),
//                                               {.max_sequences = 1, .ctx_size = 4096}));
//   ASSIGN_OR_RETURN(BatchSequence seq, kv->Append(0, tokens, /*logit_rows=*/1));
//   RETURN_IF_ERROR(model.Forward({&seq, 1}, kv->storage(), &out));
#ifndef STEPSERVE_ENGINE_RUNNER_KV_CONTEXT_H_
#define STEPSERVE_ENGINE_RUNNER_KV_CONTEXT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/sequence_blocks.h"
#include "engine/model/hparams.h"
#include "engine/model/kv_storage.h"
#include "engine/model/step35_model.h"

namespace stepserve::runner {

struct KvContextOptions {
  int32_t max_sequences = 1;
  int64_t ctx_size = 0;  // positions per sequence; > 0
  int32_t block_size = 16;
  // The most tokens one Append adds to a sequence. Sliding-window layers only hold the window,
  // this chunk and the slack, so the sliding pool is sized from it rather than from ctx_size.
  int32_t max_chunk = 512;
  int32_t rollback_slack = 0;        // positions a sequence may Truncate back (speculative drafts)
  bool include_mtp_layers = false;   // also hold KV for the MTP layers (ForwardMtp)
  KvDtype kv_dtype = KvDtype::kF32;  // element type of the cached K and V
};

class KvContext {
 public:
  // The pages come from `backend` (the model's), which must outlive the context.
  static absl::StatusOr<std::unique_ptr<KvContext>> Create(Backend& backend,
                                                           const model::Hparams& hparams,
                                                           const KvContextOptions& options);
  KvContext(const KvContext&) = delete;
  KvContext& operator=(const KvContext&) = delete;

  // Reserves positions [length(seq), length(seq) + tokens.size()) for `tokens` and returns the
  // batch entry that feeds them to Forward. The entry's tables point into this object and stay
  // valid until the next Append / Truncate / Reset of the same sequence; `tokens` must outlive
  // it. OutOfRange when the sequence would pass ctx_size, InvalidArgument for a chunk larger
  // than max_chunk or an empty one.
  absl::StatusOr<model::BatchSequence> Append(int seq, std::span<const int32_t> tokens,
                                              int32_t logit_rows);
  // Rolls sequence `seq` back to `length` positions (at most rollback_slack behind its furthest
  // sliding-window query).
  void Truncate(int seq, int64_t length);
  // Empties sequence `seq` (fresh KV for the next Append).
  void Reset(int seq);

  int64_t length(int seq) const { return sequences_[seq]->length(); }
  int64_t ctx_size() const { return options_.ctx_size; }
  int max_sequences() const { return options_.max_sequences; }
  model::KvStorage& storage() { return *storage_; }
  uint64_t bytes() const { return storage_->bytes(); }

 private:
  explicit KvContext(const KvContextOptions& options) : options_(options) {}

  KvContextOptions options_;
  std::unique_ptr<kv::BlockPool> full_pool_;
  std::unique_ptr<kv::BlockPool> swa_pool_;
  std::vector<std::unique_ptr<kv::SequenceBlocks>> sequences_;
  std::unique_ptr<model::KvStorage> storage_;
};

}  // namespace stepserve::runner

#endif  // STEPSERVE_ENGINE_RUNNER_KV_CONTEXT_H_
