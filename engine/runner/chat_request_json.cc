#include "engine/runner/chat_request_json.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/tokenizer/jinja_value.h"

namespace stepserve::runner {
namespace {

using jinja::Value;

absl::Status TypeError(const std::string& path, std::string_view expected, const Value& got) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: expected %s, got %s", path, expected, got.TypeName()));
}

// Optional string field: absent or null leaves `out` unset.
absl::Status OptionalString(const jinja::Object& object, std::string_view key,
                            const std::string& path, std::optional<std::string>* out) {
  const Value* v = object.Find(key);
  if (v == nullptr || v->is_none()) return absl::OkStatus();
  if (!v->is_string()) return TypeError(absl::StrFormat("%s.%s", path, key), "a string", *v);
  *out = v->str();
  return absl::OkStatus();
}

absl::Status ParseContent(const Value* content, const std::string& path, ChatMessage* message) {
  if (content == nullptr || content->is_none()) {
    message->has_content = false;
    return absl::OkStatus();
  }
  if (content->is_string()) {
    message->content = content->str();
    return absl::OkStatus();
  }
  if (!content->is_array()) return TypeError(path, "a string, null or a list of parts", *content);
  message->content_is_parts = true;
  for (size_t i = 0; i < content->array().size(); ++i) {
    const Value& part = content->array()[i];
    const std::string part_path = absl::StrFormat("%s[%d]", path, i);
    if (!part.is_object()) return TypeError(part_path, "an object", part);
    const Value* type = part.object().Find("type");
    if (type == nullptr || !type->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.type: missing or not a string", part_path));
    }
    ChatContentPart parsed;
    if (type->str() == "text") {
      const Value* text = part.object().Find("text");
      if (text == nullptr || !text->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.text: missing or not a string", part_path));
      }
      parsed.text = text->str();
    } else if (type->str() == "image" || type->str() == "image_url") {
      parsed.type = ChatContentPart::Type::kImage;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.type: unknown part type '%s' (text, image, image_url)", part_path, type->str()));
    }
    message->parts.push_back(std::move(parsed));
  }
  return absl::OkStatus();
}

absl::Status ParseToolCall(const Value& call, const std::string& path, ChatToolCall* out) {
  if (!call.is_object()) return TypeError(path, "an object", call);
  std::optional<std::string> id;
  RETURN_IF_ERROR(OptionalString(call.object(), "id", path, &id));
  out->id = id.value_or("");
  const Value* function = call.object().Find("function");
  const std::string fn_path = path + ".function";
  if (function == nullptr || !function->is_object()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: missing or not an object", fn_path));
  }
  const Value* name = function->object().Find("name");
  if (name == nullptr || !name->is_string()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s.name: missing or not a string", fn_path));
  }
  out->name = name->str();
  const Value* args = function->object().Find("arguments");
  if (args == nullptr || args->is_none()) {
    out->arguments = Value::MakeObject();
  } else if (args->is_string()) {
    // OpenAI sends arguments JSON-encoded; the template wants the object.
    absl::StatusOr<Value> parsed = jinja::ParseJson(args->str());
    if (!parsed.ok() || !parsed->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.arguments: not a JSON object string: %s", fn_path,
                          parsed.ok() ? "not an object" : std::string(parsed.status().message())));
    }
    out->arguments = *std::move(parsed);
  } else if (args->is_object()) {
    out->arguments = *args;
  } else {
    return TypeError(fn_path + ".arguments", "an object or a JSON string", *args);
  }
  return absl::OkStatus();
}

absl::Status ParseMessage(const Value& m, const std::string& path, ChatMessage* message) {
  if (!m.is_object()) return TypeError(path, "an object", m);
  const jinja::Object& o = m.object();
  const Value* role = o.Find("role");
  if (role == nullptr || !role->is_string()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s.role: missing or not a string", path));
  }
  message->role = role->str();
  RETURN_IF_ERROR(ParseContent(o.Find("content"), path + ".content", message));
  RETURN_IF_ERROR(OptionalString(o, "reasoning_content", path, &message->reasoning_content));
  RETURN_IF_ERROR(OptionalString(o, "tool_call_id", path, &message->tool_call_id));
  RETURN_IF_ERROR(OptionalString(o, "name", path, &message->name));
  if (const Value* calls = o.Find("tool_calls"); calls != nullptr && !calls->is_none()) {
    if (!calls->is_array()) return TypeError(path + ".tool_calls", "a list", *calls);
    for (size_t i = 0; i < calls->array().size(); ++i) {
      ChatToolCall call;
      RETURN_IF_ERROR(
          ParseToolCall(calls->array()[i], absl::StrFormat("%s.tool_calls[%d]", path, i), &call));
      message->tool_calls.push_back(std::move(call));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChatRequest> ChatRequestFromJson(std::string_view json) {
  absl::StatusOr<Value> root = jinja::ParseJson(json);
  if (!root.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("chat request is not valid JSON: %s", root.status().message()));
  }
  if (!root->is_object()) return TypeError("chat request", "an object", *root);
  ChatRequest request;
  const Value* messages = root->object().Find("messages");
  if (messages == nullptr || !messages->is_array() || messages->array().empty()) {
    return absl::InvalidArgumentError("messages: missing, not a list, or empty");
  }
  for (size_t i = 0; i < messages->array().size(); ++i) {
    ChatMessage message;
    RETURN_IF_ERROR(
        ParseMessage(messages->array()[i], absl::StrFormat("messages[%d]", i), &message));
    request.messages.push_back(std::move(message));
  }
  for (const auto& [key, value] : root->object().items()) {
    if (key == "messages") continue;
    if (key == "tools") {
      if (value.is_none()) continue;
      if (!value.is_array()) return TypeError("tools", "a list", value);
      request.tools = value;
    } else if (key == "add_generation_prompt") {
      if (!value.is_bool()) return TypeError(key, "true or false", value);
      request.add_generation_prompt = value.as_bool();
    } else if (key == "chat_template_kwargs") {
      if (!value.is_object()) return TypeError(key, "an object", value);
      for (const auto& [k, v] : value.object().items()) request.extra_vars.Set(k, v);
    } else {
      request.extra_vars.Set(key, value);
    }
  }
  return request;
}

}  // namespace stepserve::runner
