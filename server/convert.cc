#include "server/convert.h"

#include <limits>

#include "absl/strings/str_format.h"
#include "engine/tokenizer/jinja_value.h"
#include "engine/tokenizer/tokenizer.h"
#include "google/protobuf/util/json_util.h"

namespace stepserve::server {

absl::Status FillGenerationOptions(const pb::SamplingParams& sampling,
                                   const pb::StoppingCriteria& stopping,
                                   const pb::OutputOptions& output,
                                   const pb::SpeculationOptions& speculation, int32_t priority,
                                   const SamplingDefaults& defaults, int32_t vocab_size,
                                   engine::GenerationRequest* request) {
  SamplingParams& s = request->sampling;
  s.temperature = sampling.has_temperature() ? sampling.temperature() : defaults.temperature;
  s.top_p = sampling.has_top_p() ? sampling.top_p() : defaults.top_p;
  s.top_k = sampling.has_top_k() ? sampling.top_k() : defaults.top_k;
  s.min_p = sampling.has_min_p() ? sampling.min_p() : defaults.min_p;
  if (sampling.has_repetition_penalty()) s.repetition_penalty = sampling.repetition_penalty();
  if (sampling.has_presence_penalty()) s.presence_penalty = sampling.presence_penalty();
  if (sampling.has_frequency_penalty()) s.frequency_penalty = sampling.frequency_penalty();
  if (sampling.has_penalty_last_n()) s.penalty_last_n = sampling.penalty_last_n();
  if (sampling.has_seed()) request->seed = sampling.seed();
  for (const auto& [token, bias] : sampling.logit_bias()) {
    if (token >= static_cast<uint32_t>(vocab_size)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sampling.logit_bias: token id %u is outside the vocabulary (%d tokens)",
                          token, vocab_size));
    }
    s.logit_bias[static_cast<int32_t>(token)] = bias;
  }
  if (output.top_logprobs() > static_cast<uint32_t>(kMaxLogprobs)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "output.top_logprobs must be in [0, %d], got %u", kMaxLogprobs, output.top_logprobs()));
  }
  if (output.top_logprobs() > 0 && !output.return_logprobs()) {
    return absl::InvalidArgumentError("output.top_logprobs needs output.return_logprobs");
  }
  request->return_logprobs = output.return_logprobs();
  request->top_logprobs = static_cast<int32_t>(output.top_logprobs());
  s.n_logprobs = request->top_logprobs;
  request->skip_special_tokens =
      output.has_skip_special_tokens() ? output.skip_special_tokens() : true;
  request->ignore_eos = stopping.ignore_eos();
  s.ignore_eos = request->ignore_eos;
  if (absl::Status st = s.Validate(vocab_size); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("sampling.%s", st.message()));
  }

  request->max_new_tokens = stopping.has_max_tokens() ? stopping.max_tokens() : 0;
  if (stopping.has_max_tokens() && stopping.max_tokens() == 0) {
    return absl::InvalidArgumentError("stopping.max_tokens must be at least 1 when set");
  }
  for (int i = 0; i < stopping.stop_size(); ++i) {
    if (stopping.stop(i).empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("stopping.stop[%d] is empty", i));
    }
    request->stop.push_back(stopping.stop(i));
  }
  for (int i = 0; i < stopping.stop_token_ids_size(); ++i) {
    const uint32_t id = stopping.stop_token_ids(i);
    if (id >= static_cast<uint32_t>(vocab_size)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stopping.stop_token_ids[%d] = %u is outside the vocabulary (%d tokens)",
                          i, id, vocab_size));
    }
    request->stop_token_ids.push_back(static_cast<int32_t>(id));
  }

  switch (speculation.mode()) {
    case pb::SpeculationOptions::MODE_OFF:
      request->speculation = engine::SpeculationMode::kOff;
      break;
    case pb::SpeculationOptions::MODE_ON:
      request->speculation = engine::SpeculationMode::kOn;
      break;
    default:
      request->speculation = engine::SpeculationMode::kAuto;
      break;
  }
  if (speculation.has_max_draft_tokens()) {
    if (speculation.max_draft_tokens() > 64) {
      return absl::InvalidArgumentError(
          absl::StrFormat("speculation.max_draft_tokens must be at most 64, got %u",
                          speculation.max_draft_tokens()));
    }
    request->max_draft_tokens = static_cast<int32_t>(speculation.max_draft_tokens());
  }
  request->priority = priority;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> PromptTokens(const pb::GenerateRequest& request,
                                                  const tokenizer::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  switch (request.input_case()) {
    case pb::GenerateRequest::kText: {
      if (request.text().empty()) return absl::InvalidArgumentError("text is empty");
      const bool add_bos =
          (request.has_add_bos() ? request.add_bos() : true) && tokenizer.add_bos_token();
      ids = tokenizer.Encode(request.text(), add_bos, request.parse_special());
      break;
    }
    case pb::GenerateRequest::kTokens: {
      const auto& in = request.tokens().ids();
      if (in.empty()) return absl::InvalidArgumentError("tokens.ids is empty");
      ids.reserve(in.size());
      for (int i = 0; i < in.size(); ++i) {
        if (in[i] >= static_cast<uint32_t>(tokenizer.vocab_size())) {
          return absl::InvalidArgumentError(
              absl::StrFormat("tokens.ids[%d] = %u is outside the vocabulary (%d tokens)", i, in[i],
                              tokenizer.vocab_size()));
        }
        ids.push_back(static_cast<int32_t>(in[i]));
      }
      break;
    }
    default:
      return absl::InvalidArgumentError("input: set text or tokens");
  }
  if (ids.empty()) return absl::InvalidArgumentError("text tokenizes to no tokens");
  return ids;
}

absl::StatusOr<ChatRequest> ToChatRequest(const pb::ChatRequest& request) {
  if (request.messages().empty()) return absl::InvalidArgumentError("messages is empty");
  ChatRequest out;
  // Step models loop on stray whitespace (chat_template.h); the server trims as llama.cpp does.
  out.trim_message_content = true;
  for (int i = 0; i < request.messages_size(); ++i) {
    const pb::ChatMessage& m = request.messages(i);
    if (m.role() != "system" && m.role() != "user" && m.role() != "assistant" &&
        m.role() != "tool") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "messages[%d].role must be system, user, assistant or tool, got \"%s\"", i, m.role()));
    }
    ChatMessage msg;
    msg.role = m.role();
    msg.content = m.content();
    msg.has_content = !(m.content().empty() && m.tool_calls_size() > 0);
    if (!m.reasoning_content().empty()) msg.reasoning_content = m.reasoning_content();
    if (!m.tool_call_id().empty()) msg.tool_call_id = m.tool_call_id();
    if (!m.name().empty()) msg.name = m.name();
    for (int j = 0; j < m.tool_calls_size(); ++j) {
      const pb::ToolCall& call = m.tool_calls(j);
      ChatToolCall tc;
      tc.id = call.id();
      tc.name = call.name();
      auto args = jinja::ParseJson(call.arguments_json().empty() ? "{}" : call.arguments_json());
      if (!args.ok()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "messages[%d].tool_calls[%d].arguments_json: %s", i, j, args.status().message()));
      }
      tc.arguments = *std::move(args);
      msg.tool_calls.push_back(std::move(tc));
    }
    out.messages.push_back(std::move(msg));
  }
  if (request.tools_size() > 0) {
    jinja::Array tools;
    for (int i = 0; i < request.tools_size(); ++i) {
      const pb::Tool& tool = request.tools(i);
      if (tool.name().empty()) {
        return absl::InvalidArgumentError(absl::StrFormat("tools[%d].name is empty", i));
      }
      jinja::Object fn;
      fn.Set("name", jinja::Value::String(tool.name()));
      fn.Set("description", jinja::Value::String(tool.description()));
      const std::string& schema = tool.parameters_json_schema();
      auto params = jinja::ParseJson(schema.empty() ? "{\"type\":\"object\"}" : schema);
      if (!params.ok()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("tools[%d].parameters_json_schema: %s", i, params.status().message()));
      }
      fn.Set("parameters", *std::move(params));
      jinja::Object entry;
      entry.Set("type", jinja::Value::String("function"));
      entry.Set("function", jinja::Value::MakeObject(std::move(fn)));
      tools.push_back(jinja::Value::MakeObject(std::move(entry)));
    }
    out.tools = jinja::Value::MakeArray(std::move(tools));
  }
  if (request.has_template_kwargs()) {
    std::string json;
    if (!google::protobuf::util::MessageToJsonString(request.template_kwargs(), &json).ok()) {
      return absl::InvalidArgumentError("template_kwargs: cannot convert to JSON");
    }
    auto kwargs = jinja::ParseJson(json);
    if (!kwargs.ok() || kwargs->kind() != jinja::Value::Kind::kObject) {
      return absl::InvalidArgumentError("template_kwargs: not a JSON object");
    }
    for (const auto& [key, value] : kwargs->object().items()) out.extra_vars.Set(key, value);
  }
  return out;
}

void ToProto(const engine::StartedEvent& event, pb::Started* out) {
  out->set_prompt_tokens(event.prompt_tokens);
  out->set_cached_tokens(event.cached_tokens);
  out->set_queue_seconds(event.queue_seconds);
}

void AppendDelta(const engine::DeltaEvent& event, bool token_ids, bool logprobs, pb::Delta* out) {
  out->mutable_text()->append(event.text);
  if (token_ids) {
    for (int32_t id : event.token_ids) out->add_token_ids(static_cast<uint32_t>(id));
  }
  if (logprobs) {
    for (const engine::TokenLogprob& lp : event.logprobs) {
      pb::TokenLogprob* p = out->add_logprobs();
      p->set_token_id(static_cast<uint32_t>(lp.token_id));
      p->set_logprob(lp.logprob);
      for (const auto& [id, value] : lp.top) {
        pb::TopLogprob* t = p->add_top();
        t->set_token_id(static_cast<uint32_t>(id));
        t->set_logprob(value);
      }
    }
  }
  out->set_completion_tokens(static_cast<uint32_t>(event.completion_tokens));
}

void ToProto(const engine::FinishedEvent& event, bool aborted, pb::Final* out) {
  switch (event.reason) {
    case engine::FinishReason::kStop:
      out->set_finish_reason(pb::Final::STOP);
      break;
    case engine::FinishReason::kLength:
      out->set_finish_reason(pb::Final::LENGTH);
      break;
    case engine::FinishReason::kCancelled:
      out->set_finish_reason(aborted ? pb::Final::ABORT : pb::Final::FINISH_REASON_UNSPECIFIED);
      break;
    default:
      out->set_finish_reason(pb::Final::ABORT);
      break;
  }
  if (event.matched_stop.has_value()) {
    out->set_matched_stop_str(*event.matched_stop);
  } else if (event.matched_token_id.has_value()) {
    out->set_matched_token_id(static_cast<uint32_t>(*event.matched_token_id));
  }
  pb::Usage* usage = out->mutable_usage();
  usage->set_prompt_tokens(event.usage.prompt_tokens);
  usage->set_completion_tokens(event.usage.completion_tokens);
  usage->set_cached_tokens(event.usage.cached_tokens);
  pb::Timings* t = out->mutable_timings();
  t->set_queue_seconds(event.timings.queue_s);
  t->set_time_to_first_token_seconds(event.timings.ttft_s);
  t->set_prefill_seconds(event.timings.prefill_s);
  t->set_decode_seconds(event.timings.decode_s);
  t->set_e2e_seconds(event.timings.e2e_s);
  pb::SpeculationStats* s = out->mutable_speculation();
  s->set_active(event.speculation.active);
  s->set_disabled_reason(event.speculation.disabled_reason);
  s->set_drafts(event.speculation.drafts);
  s->set_draft_tokens(event.speculation.draft_tokens);
  s->set_accepted_tokens(event.speculation.accepted_tokens);
  for (int32_t n : event.speculation.accepted_per_position) s->add_accepted_per_position(n);
}

absl::Status FinishStatus(const engine::FinishedEvent& event, bool aborted) {
  switch (event.reason) {
    case engine::FinishReason::kStop:
    case engine::FinishReason::kLength:
    case engine::FinishReason::kAbort:
      return absl::OkStatus();
    case engine::FinishReason::kCancelled:
      return aborted ? absl::OkStatus() : absl::CancelledError("request cancelled");
    case engine::FinishReason::kDeadlineExceeded:
      return absl::DeadlineExceededError(event.error.ok() ? "deadline exceeded"
                                                          : std::string(event.error.message()));
    case engine::FinishReason::kError:
      return absl::InternalError(std::string(event.error.message()));
  }
  return absl::InternalError("unknown finish reason");
}

std::string ToValidUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
    const unsigned char c = b(i);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      len = 1;
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    }
    bool ok = len > 0 && i + len <= bytes.size();
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (b(i + k) & 0xC0) == 0x80;
      cp = (cp << 6) | (b(i + k) & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either.
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMin[len] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
    if (ok) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

const char* StatusCodeName(int code) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  if (code < 0 || code > 16) return "UNKNOWN";
  return kNames[code];
}

}  // namespace stepserve::server
