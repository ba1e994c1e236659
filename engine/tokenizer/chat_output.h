// Parsing of Step model output: reasoning (the generation prompt already opened `<think>`, so
// everything before `</think>` is reasoning), content, and tool calls in the XML format
//   <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// Parameter values are JSON-decoded when they parse as JSON, else kept as strings.
// StepOutputStream is the incremental form for streamed text; feeding any chunking of a text and
// then Finish() yields exactly what ParseStepOutput returns for the whole text.
#ifndef STEPSERVE_ENGINE_TOKENIZER_CHAT_OUTPUT_H_
#define STEPSERVE_ENGINE_TOKENIZER_CHAT_OUTPUT_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja_value.h"

namespace stepserve {

struct ParsedToolCall {
  std::string name;
  jinja::Value arguments;  // JSON object
};

struct ChatOutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;  // completed calls only
};

class StepOutputStream {
 public:
  // `reasoning_open`: the prompt ended in `<think>` (Step always opens it).
  explicit StepOutputStream(bool reasoning_open = true)
      : phase_(reasoning_open ? Phase::kReasoning : Phase::kContent) {}

  // Consumes a chunk and returns what became certain. Text that might be the start of a
  // `</think>` / `<tool_call>` marker is held back until the next chunk decides it.
  absl::StatusOr<ChatOutputDelta> Feed(std::string_view chunk);
  // End of generation: releases held-back text. An unterminated `<tool_call>` block (generation
  // cut off) is returned as content, not as a call.
  absl::StatusOr<ChatOutputDelta> Finish();

 private:
  enum class Phase { kReasoning, kContent, kToolCall };
  absl::Status Drain(bool final, ChatOutputDelta& out);
  Phase phase_;
  std::string buf_;
  bool skip_leading_newlines_ = false;
};

// Parses one complete output.
absl::StatusOr<ChatOutputDelta> ParseStepOutput(std::string_view text, bool reasoning_open = true);

// Parses the inside of one <tool_call>...</tool_call> block.
absl::StatusOr<ParsedToolCall> ParseStepToolCall(std::string_view block);

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_TOKENIZER_CHAT_OUTPUT_H_
