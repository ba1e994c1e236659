// Conversions between the public proto (stepserve.v1) and the engine's plain structs: request
// validation (errors name the proto field), events to stream messages, finish reasons, and chat
// requests to the chat-template input.
#ifndef STEPSERVE_SERVER_CONVERT_H_
#define STEPSERVE_SERVER_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/runtime/engine.h"
#include "engine/tokenizer/chat_template.h"
#include "stepserve/v1/inference.pb.h"

namespace stepserve::server {

namespace pb = ::stepserve::v1;

// Server-wide defaults for unset sampling fields (stepserve serve --temperature ...).
struct SamplingDefaults {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
};

// Fills everything but request_id and prompt from the fields Generate and Chat share.
// INVALID_ARGUMENT naming the field ("sampling.top_p must be in (0, 1], got 1.5").
absl::Status FillGenerationOptions(const pb::SamplingParams& sampling,
                                   const pb::StoppingCriteria& stopping,
                                   const pb::OutputOptions& output,
                                   const pb::SpeculationOptions& speculation, int32_t priority,
                                   const SamplingDefaults& defaults, int32_t vocab_size,
                                   engine::GenerationRequest* request);

// Token ids of a GenerateRequest (text tokenized, or ids checked against the vocabulary).
absl::StatusOr<std::vector<int32_t>> PromptTokens(const pb::GenerateRequest& request,
                                                  const tokenizer::Tokenizer& tokenizer);

// Chat messages / tools / template_kwargs to the chat-template input.
absl::StatusOr<ChatRequest> ToChatRequest(const pb::ChatRequest& request);

void ToProto(const engine::StartedEvent& event, pb::Started* out);
// Appends the delta's token ids / logprobs (when requested) to the message fields.
void AppendDelta(const engine::DeltaEvent& event, bool token_ids, bool logprobs, pb::Delta* out);
// `aborted` turns a kCancelled end (the Abort RPC) into finish_reason ABORT.
void ToProto(const engine::FinishedEvent& event, bool aborted, pb::Final* out);
// OK when the request ended normally (stop, length, abort); the gRPC status otherwise
// (CANCELLED, DEADLINE_EXCEEDED, INTERNAL), `aborted` as above.
absl::Status FinishStatus(const engine::FinishedEvent& event, bool aborted);

// `bytes` with every byte that does not belong to a well-formed UTF-8 sequence replaced by
// U+FFFD: proto3 string fields must be UTF-8, and arbitrary token ids can decode to partial
// characters (Detokenize).
std::string ToValidUtf8(std::string_view bytes);

// The gRPC status-code name ("OK", "INVALID_ARGUMENT") for metric labels.
const char* StatusCodeName(int code);

}  // namespace stepserve::server

#endif  // STEPSERVE_SERVER_CONVERT_H_
