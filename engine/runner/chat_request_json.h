// An OpenAI-style chat request as JSON -> ChatRequest (engine/tokenizer/chat_template.h), for the
// command-line tools (`stepserve generate --chat`). Accepted shape:
//   {"messages": [{"role": "user", "content": "Hi"}, ...],   required, non-empty
//    "tools": [{"type": "function", "function": {...}}],       optional
//    "add_generation_prompt": true,                             optional (default true)
//    "chat_template_kwargs": {"enable_thinking": true},         optional, template variables
//    any other key (e.g. "reasoning_effort")                    passed to the template as is}
// Message content is a string, null, or a list of {"type": "text", "text": ...} /
// {"type": "image"...} parts; tool_calls are {"id", "type", "function": {"name", "arguments"}}
// with arguments as an object or a JSON-encoded string. Errors name the offending path, e.g.
// "messages[2].tool_calls[0].function.name: expected a string".
#ifndef STEPSERVE_ENGINE_RUNNER_CHAT_REQUEST_JSON_H_
#define STEPSERVE_ENGINE_RUNNER_CHAT_REQUEST_JSON_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/chat_template.h"

namespace stepserve::runner {

absl::StatusOr<ChatRequest> ChatRequestFromJson(std::string_view json);

}  // namespace stepserve::runner

#endif  // STEPSERVE_ENGINE_RUNNER_CHAT_REQUEST_JSON_H_
