// Chat-template rendering: a chat request (messages, tools, options) rendered through the model's
// Jinja template (from GGUF `tokenizer.chat_template`) exactly as Hugging Face would render it.
#ifndef STEPSERVE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
#define STEPSERVE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_

#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja_template.h"
#include "engine/tokenizer/jinja_value.h"

namespace stepserve {

struct ChatContentPart {
  enum class Type { kText, kImage };
  Type type = Type::kText;
  std::string text;  // kText
};

struct ChatToolCall {
  std::string id;
  std::string name;
  jinja::Value arguments;  // JSON object (parsed arguments)
};

struct ChatMessage {
  std::string role;
  // Content is either a string or parts; `content_is_parts` selects which. A message with
  // neither (`has_content` false) has content None, as OpenAI clients send for tool-call turns.
  bool has_content = true;
  bool content_is_parts = false;
  std::string content;
  std::vector<ChatContentPart> parts;
  std::optional<std::string> reasoning_content;
  std::vector<ChatToolCall> tool_calls;
  std::optional<std::string> tool_call_id;
  std::optional<std::string> name;
};

struct ChatRequest {
  std::vector<ChatMessage> messages;
  jinja::Value tools;  // JSON array of {"type":"function","function":{...}}; undefined = none
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  jinja::Object extra_vars;  // e.g. reasoning_effort, enable_thinking
  // llama.cpp trims every message's text content (and reasoning) before rendering Step's template
  // (issue #24181: stray whitespace causes reasoning loops). Off by default so the rendering is
  // exactly Hugging Face's; servers turn it on for Step models.
  bool trim_message_content = false;
  std::optional<std::time_t> now;  // strftime_now's clock; unset = current time
};

// The template context a request maps to (messages as OpenAI-style JSON: tool calls as
// {"id","type":"function","function":{"name","arguments"}}, image parts as {"type":"image"}).
jinja::Object ChatRequestToContext(const ChatRequest& request);

class ChatTemplate {
 public:
  static absl::StatusOr<ChatTemplate> Create(std::string template_text);
  absl::StatusOr<std::string> Render(const ChatRequest& request) const;
  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, jinja::JinjaTemplate t)
      : source_(std::move(source)), template_(std::move(t)) {}
  std::string source_;
  jinja::JinjaTemplate template_;
};

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
