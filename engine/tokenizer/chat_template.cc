#include "engine/tokenizer/chat_template.h"

#include <utility>

namespace stepserve {
namespace {

using jinja::Array;
using jinja::Object;
using jinja::Value;

std::string MaybeTrim(const std::string& s, bool trim) {
  if (!trim) return s;
  size_t b = s.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n\r\f\v");
  return s.substr(b, e - b + 1);
}

}  // namespace

Object ChatRequestToContext(const ChatRequest& request) {
  const bool trim = request.trim_message_content;
  Array messages;
  for (const ChatMessage& m : request.messages) {
    Object msg;
    msg.Set("role", Value::String(m.role));
    if (!m.has_content) {
      msg.Set("content", Value::None());
    } else if (m.content_is_parts) {
      Array parts;
      for (const ChatContentPart& p : m.parts) {
        Object part;
        if (p.type == ChatContentPart::Type::kText) {
          part.Set("type", Value::String("text"));
          part.Set("text", Value::String(MaybeTrim(p.text, trim)));
        } else {
          part.Set("type", Value::String("image"));
        }
        parts.push_back(Value::MakeObject(std::move(part)));
      }
      msg.Set("content", Value::MakeArray(std::move(parts)));
    } else {
      msg.Set("content", Value::String(MaybeTrim(m.content, trim)));
    }
    if (m.reasoning_content) {
      msg.Set("reasoning_content", Value::String(MaybeTrim(*m.reasoning_content, trim)));
    }
    if (!m.tool_calls.empty()) {
      Array calls;
      for (const ChatToolCall& c : m.tool_calls) {
        Object fn;
        fn.Set("name", Value::String(c.name));
        fn.Set("arguments", c.arguments.is_undefined() ? Value::MakeObject() : c.arguments);
        Object call;
        if (!c.id.empty()) call.Set("id", Value::String(c.id));
        call.Set("type", Value::String("function"));
        call.Set("function", Value::MakeObject(std::move(fn)));
        calls.push_back(Value::MakeObject(std::move(call)));
      }
      msg.Set("tool_calls", Value::MakeArray(std::move(calls)));
    }
    if (m.tool_call_id) msg.Set("tool_call_id", Value::String(*m.tool_call_id));
    if (m.name) msg.Set("name", Value::String(*m.name));
    messages.push_back(Value::MakeObject(std::move(msg)));
  }
  Object ctx;
  ctx.Set("messages", Value::MakeArray(std::move(messages)));
  if (!request.tools.is_undefined()) ctx.Set("tools", request.tools);
  ctx.Set("add_generation_prompt", Value::Bool(request.add_generation_prompt));
  ctx.Set("bos_token", Value::String(request.bos_token));
  ctx.Set("eos_token", Value::String(request.eos_token));
  for (const auto& [k, v] : request.extra_vars.items()) ctx.Set(k, v);
  return ctx;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Create(std::string template_text) {
  auto t = jinja::JinjaTemplate::Parse(template_text);
  if (!t.ok()) return t.status();
  return ChatTemplate(std::move(template_text), *std::move(t));
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatRequest& request) const {
  jinja::RenderOptions options;
  options.now = request.now;
  return template_.Render(ChatRequestToContext(request), options);
}

}  // namespace stepserve
