#include "engine/synth/metadata.h"

#include <string>

namespace stepserve::synth {
namespace {

constexpr char kChatTemplate[] =
#include "engine/synth/step_chat_template.inc"
    ;

constexpr char kArch[] = "step35";

std::string Key(std::string_view suffix) { return std::string(kArch) + "." + std::string(suffix); }

gguf::Value U32(int64_t v) { return gguf::Value(static_cast<uint32_t>(v)); }
gguf::Value F32(double v) { return gguf::Value(static_cast<float>(v)); }

}  // namespace

std::string_view StepChatTemplate() {
  return std::string_view(kChatTemplate, sizeof(kChatTemplate) - 1);
}

void AddModelMetadata(const ModelPlan& plan, gguf::Metadata* md) {
  const Step35Config& c = plan.config;
  md->Set("general.architecture", gguf::Value(std::string(kArch)));
  md->Set("general.type", gguf::Value(std::string("model")));
  md->Set("general.name", gguf::Value(c.name));
  md->Set("general.file_type", U32(plan.file_type));
  md->Set("general.quantization_version", U32(2));

  md->Set(Key("block_count"), U32(c.block_count()));
  if (c.n_mtp > 0) md->Set(Key("nextn_predict_layers"), U32(c.n_mtp));
  md->Set(Key("context_length"), U32(c.context_length));
  md->Set(Key("embedding_length"), U32(c.n_embd));
  md->Set(Key("feed_forward_length"), U32(c.n_ff));
  md->Set(Key("attention.head_count"), gguf::Value::Int32Array(c.head_count));
  md->Set(Key("attention.head_count_kv"), gguf::Value::Int32Array(c.head_count_kv));
  md->Set(Key("attention.key_length"), U32(c.head_dim));
  md->Set(Key("attention.value_length"), U32(c.head_dim));
  md->Set(Key("attention.layer_norm_rms_epsilon"), F32(c.rms_eps));
  md->Set(Key("attention.sliding_window"), U32(c.sliding_window));
  md->Set(Key("attention.sliding_window_pattern"), gguf::Value::BoolArray(c.is_swa));
  md->Set(Key("rope.freq_base"), F32(c.rope_base_full));
  md->Set(Key("rope.freq_base_swa"), F32(c.rope_base_swa));
  if (c.write_rope_dims) {
    md->Set(Key("rope.dimension_count"), U32(c.n_rot_full));
    md->Set(Key("rope.dimension_count_swa"), U32(c.n_rot_swa));
  }
  md->Set(Key("expert_count"), U32(c.n_expert));
  md->Set(Key("expert_used_count"), U32(c.n_expert_used));
  md->Set(Key("expert_feed_forward_length"), U32(c.n_ff_exp));
  md->Set(Key("expert_shared_feed_forward_length"), U32(c.n_ff_shexp));
  md->Set(Key("expert_weights_scale"), F32(c.expert_weights_scale));
  md->Set(Key("expert_weights_norm"), gguf::Value(c.expert_weights_norm));
  md->Set(Key("expert_gating_func"), U32(c.expert_gating_func));
  md->Set(Key("leading_dense_block_count"), U32(c.leading_dense_block_count));
  md->Set(Key("moe_every_n_layers"), U32(1));
  md->Set(Key("swiglu_clamp_exp"), gguf::Value::Float32Array(c.clamp_exp));
  md->Set(Key("swiglu_clamp_shexp"), gguf::Value::Float32Array(c.clamp_shexp));
}

void AddTokenizerMetadata(const SynthVocab& v, gguf::Metadata* md) {
  md->Set("tokenizer.ggml.model", gguf::Value(std::string("gpt2")));
  md->Set("tokenizer.ggml.pre", gguf::Value(std::string("deepseek-v3")));
  md->Set("tokenizer.ggml.tokens", gguf::Value::StringArray(v.tokens));
  md->Set("tokenizer.ggml.token_type", gguf::Value::Int32Array(v.token_types));
  md->Set("tokenizer.ggml.merges", gguf::Value::StringArray(v.merges));
  md->Set("tokenizer.ggml.bos_token_id", U32(v.bos_id));
  md->Set("tokenizer.ggml.eos_token_id", U32(v.eos_id));
  md->Set("tokenizer.ggml.padding_token_id", U32(v.padding_id));
  // Not confirmed for the official files (spec 9.10); DeepSeek-V3-style vocabularies set it and the
  // template also emits bos_token, so a loader that honours both would see two BOS tokens.
  md->Set("tokenizer.ggml.add_bos_token", gguf::Value(true));
  md->Set("tokenizer.ggml.add_eos_token", gguf::Value(false));
  md->Set("tokenizer.chat_template", gguf::Value(std::string(StepChatTemplate())));
}

}  // namespace stepserve::synth
