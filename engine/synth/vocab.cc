#include "engine/synth/vocab.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/synth/bpe_trainer.h"
#include "engine/synth/corpus.h"

namespace stepserve::synth {

std::vector<std::string> StepSpecialTokens() {
  return {"<|im_start|>", "<|im_end|>",      "<think>",          "</think>",  "<tool_call>",
          "</tool_call>", "<tool_response>", "</tool_response>", "<im_patch>"};
}

absl::StatusOr<SynthVocab> BuildSynthVocab(int max_merges, int64_t pad_to) {
  absl::StatusOr<BpeModel> bpe = TrainBpe(TrainingCorpus(), max_merges, /*min_count=*/1);
  if (!bpe.ok()) return bpe.status();
  SynthVocab v;
  v.tokens = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"};
  v.token_types = {kControl, kControl};
  v.bos_id = 0;
  v.padding_id = 1;
  for (std::string& text : bpe->TokenTexts()) {
    v.tokens.push_back(std::move(text));
    v.token_types.push_back(kNormal);
  }
  v.merges = bpe->MergeStrings();
  v.first_merge_id = 2 + 256;
  v.n_merges = static_cast<int32_t>(v.merges.size());

  const std::vector<std::string> specials = StepSpecialTokens();
  if (pad_to == 0) {
    v.eos_id = static_cast<uint32_t>(v.tokens.size() + 1);  // <|im_end|>
  } else {
    if (static_cast<int64_t>(v.tokens.size()) > kPaddedFirstSpecialId ||
        pad_to < kPaddedFirstSpecialId + static_cast<int64_t>(specials.size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "vocabulary of %d trained tokens cannot be padded to %d with the specials at %d",
          v.tokens.size(), pad_to, kPaddedFirstSpecialId));
    }
    while (static_cast<int64_t>(v.tokens.size()) < kPaddedFirstSpecialId) {
      v.tokens.push_back(absl::StrFormat("<|reserved_token_%d|>", v.tokens.size()));
      v.token_types.push_back(kUnused);
    }
    v.eos_id = static_cast<uint32_t>(kPaddedFirstSpecialId + 1);
  }
  for (const std::string& s : specials) {
    v.tokens.push_back(s);
    v.token_types.push_back(kControl);
  }
  while (static_cast<int64_t>(v.tokens.size()) < pad_to) {
    v.tokens.push_back(absl::StrFormat("<|reserved_token_%d|>", v.tokens.size()));
    v.token_types.push_back(kUnused);
  }
  return v;
}

}  // namespace stepserve::synth
