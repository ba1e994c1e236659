#include "engine/tokenizer/chat_output.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace stepserve {
namespace {

constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kCallBegin = "<tool_call>";
constexpr std::string_view kCallEnd = "</tool_call>";

// Length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t PartialSuffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

std::string_view TrimNewlines(std::string_view s) {
  while (!s.empty() && (s.front() == '\n' || s.front() == ' ')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  return s;
}

}  // namespace

absl::StatusOr<ParsedToolCall> ParseStepToolCall(std::string_view block) {
  std::string_view s = TrimNewlines(block);
  constexpr std::string_view kFn = "<function=";
  if (s.substr(0, kFn.size()) != kFn) {
    return absl::InvalidArgumentError("tool call: expected <function=NAME>");
  }
  size_t close = s.find('>');
  ParsedToolCall call;
  call.name =
      std::string(s.substr(kFn.size(), close == std::string_view::npos ? 0 : close - kFn.size()));
  if (close == std::string_view::npos || call.name.empty()) {
    return absl::InvalidArgumentError("tool call: malformed <function=NAME>");
  }
  s.remove_prefix(close + 1);
  jinja::Object args;
  constexpr std::string_view kParam = "<parameter=";
  constexpr std::string_view kParamEnd = "</parameter>";
  while (true) {
    s = TrimNewlines(s);
    if (s.substr(0, kParam.size()) != kParam) break;
    size_t name_end = s.find('>');
    if (name_end == std::string_view::npos) {
      return absl::InvalidArgumentError("tool call: malformed <parameter=NAME>");
    }
    std::string name(s.substr(kParam.size(), name_end - kParam.size()));
    s.remove_prefix(name_end + 1);
    size_t end = s.find(kParamEnd);
    if (end == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tool call: parameter '%s' has no </parameter>", name));
    }
    std::string_view value = s.substr(0, end);
    // The format puts the value between newlines; drop exactly those.
    if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    auto json = jinja::ParseJson(value);
    args.Set(std::move(name),
             json.ok() ? *std::move(json) : jinja::Value::String(std::string(value)));
    s.remove_prefix(end + kParamEnd.size());
  }
  if (s.substr(0, 11) != "</function>") {
    return absl::InvalidArgumentError("tool call: expected </function>");
  }
  s.remove_prefix(11);
  if (!TrimNewlines(s).empty()) {
    return absl::InvalidArgumentError("tool call: unexpected text after </function>");
  }
  call.arguments = jinja::Value::MakeObject(std::move(args));
  return call;
}

absl::Status StepOutputStream::Drain(bool final, ChatOutputDelta& out) {
  while (true) {
    if (skip_leading_newlines_) {
      size_t i = 0;
      while (i < buf_.size() && buf_[i] == '\n') ++i;
      buf_.erase(0, i);
      if (buf_.empty() && !final) return absl::OkStatus();
      skip_leading_newlines_ = false;
    }
    if (phase_ == Phase::kToolCall) {
      size_t end = buf_.find(kCallEnd);
      if (end == std::string::npos) {
        if (final) {  // cut off mid-call: surface the raw text
          out.content += std::string(kCallBegin) + buf_;
          buf_.clear();
        }
        return absl::OkStatus();
      }
      auto call = ParseStepToolCall(std::string_view(buf_).substr(0, end));
      if (!call.ok()) return call.status();
      out.tool_calls.push_back(*std::move(call));
      buf_.erase(0, end + kCallEnd.size());
      phase_ = Phase::kContent;
      skip_leading_newlines_ = true;
      continue;
    }
    std::string& sink = phase_ == Phase::kReasoning ? out.reasoning : out.content;
    size_t think = phase_ == Phase::kReasoning ? buf_.find(kThinkEnd) : std::string::npos;
    size_t call = buf_.find(kCallBegin);
    if (think != std::string::npos && (call == std::string::npos || think < call)) {
      sink += buf_.substr(0, think);
      buf_.erase(0, think + kThinkEnd.size());
      phase_ = Phase::kContent;
      skip_leading_newlines_ = true;
      continue;
    }
    if (call != std::string::npos) {
      sink += buf_.substr(0, call);
      buf_.erase(0, call + kCallBegin.size());
      phase_ = Phase::kToolCall;
      continue;
    }
    size_t hold = 0;
    if (!final) {
      hold = PartialSuffix(buf_, kCallBegin);
      if (phase_ == Phase::kReasoning) hold = std::max(hold, PartialSuffix(buf_, kThinkEnd));
    }
    sink += buf_.substr(0, buf_.size() - hold);
    buf_.erase(0, buf_.size() - hold);
    return absl::OkStatus();
  }
}

absl::StatusOr<ChatOutputDelta> StepOutputStream::Feed(std::string_view chunk) {
  buf_.append(chunk);
  ChatOutputDelta out;
  if (auto s = Drain(false, out); !s.ok()) return s;
  return out;
}

absl::StatusOr<ChatOutputDelta> StepOutputStream::Finish() {
  ChatOutputDelta out;
  if (auto s = Drain(true, out); !s.ok()) return s;
  return out;
}

absl::StatusOr<ChatOutputDelta> ParseStepOutput(std::string_view text, bool reasoning_open) {
  StepOutputStream stream(reasoning_open);
  auto a = stream.Feed(text);
  if (!a.ok()) return a;
  auto b = stream.Finish();
  if (!b.ok()) return b;
  a->reasoning += b->reasoning;
  a->content += b->content;
  for (auto& c : b->tool_calls) a->tool_calls.push_back(std::move(c));
  return a;
}

}  // namespace stepserve
