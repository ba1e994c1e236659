// GGUF metadata of a synthetic step35 file, with the key names and value types the llama.cpp
// converter writes (spec: step35-architecture.md 2.1 and 7.1; gguf-and-quants.md A.10, A.11):
// scalars UINT32 / FLOAT32 / BOOL, per-layer arrays INT32 / BOOL / FLOAT32 of block_count entries.
#ifndef STEPSERVE_ENGINE_SYNTH_METADATA_H_
#define STEPSERVE_ENGINE_SYNTH_METADATA_H_

#include <string_view>

#include "engine/gguf/gguf_value.h"
#include "engine/synth/plan.h"
#include "engine/synth/vocab.h"

namespace stepserve::synth {

// general.* and step35.* keys for the plan's config and part (a trunk-only file has no
// nextn_predict_layers key and arrays of n_layer entries).
void AddModelMetadata(const ModelPlan& plan, gguf::Metadata* metadata);

// tokenizer.* keys: gpt2 / deepseek-v3, tokens, token_type, merges, special ids, add_bos_token,
// and the StepFun chat template.
void AddTokenizerMetadata(const SynthVocab& vocab, gguf::Metadata* metadata);

// llama.cpp's models/templates/StepFun3.5-Flash.jinja, embedded at build time.
std::string_view StepChatTemplate();

}  // namespace stepserve::synth

#endif  // STEPSERVE_ENGINE_SYNTH_METADATA_H_
