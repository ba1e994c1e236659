// `stepserve generate`: one prompt (plain text or a chat request rendered with the model's own
// template) through the CPU forward pass, streamed to stdout token by token.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/model/step35_model.h"
#include "engine/runner/chat_request_json.h"
#include "engine/runner/generator.h"
#include "engine/sampling/sampling_params.h"
#include "engine/spec/mtp_speculator.h"
#include "engine/tokenizer/chat_output.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/jinja_value.h"
#include "engine/tokenizer/streaming_decoder.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/args.h"
#include "server/cli/backend_flags.h"
#include "server/subcommand.h"

namespace stepserve::cli {
namespace {

constexpr char kDescription[] =
    "Generates text from a step35 GGUF on the CPU. --prompt TEXT is tokenized as is (BOS first\n"
    "when the vocabulary adds one); --chat takes a JSON file or inline JSON {\"messages\": [...],\n"
    "\"tools\": [...], ...} rendered with the model's tokenizer.chat_template (message content\n"
    "trimmed, as llama.cpp does for Step). Text streams to stdout as tokens are produced; with\n"
    "--chat, reasoning goes to stderr (grey on a terminal), content to stdout and parsed tool\n"
    "calls as one JSON line at the end. The stop reason and a timing summary go to stderr.\n"
    "Sampling defaults follow llama.cpp (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05);\n"
    "--temperature 0 is greedy. -n is short for --n-predict.\n"
    "--draft F decodes speculatively with MTP heads (engine/spec): F is a separate MTP-only or\n"
    "combined GGUF, or the --model file itself to use its embedded heads; acceptance statistics\n"
    "go to stderr as JSON.";

struct Flags {
  std::string model, prompt, chat, draft;
  int64_t draft_max = 3;
  int64_t n_predict = 128, top_k = 40, seed = -1, threads = 0, ctx_size = 0, repeat_last_n = 64;
  int64_t prefill_chunk = 512;
  double temperature = 0.8, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0;
  double presence_penalty = 0.0, frequency_penalty = 0.0;
  bool no_bos = false, parse_special = false, show_special = false;
  BackendFlags backend;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot open %s", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrFormat("error reading %s", path));
  return text.str();
}

// Inline JSON starts with '{' (after whitespace); anything else names a file.
absl::StatusOr<std::string> ChatJson(const std::string& arg) {
  const size_t first = arg.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && arg[first] == '{') return arg;
  absl::StatusOr<std::string> text = ReadFile(arg);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrFormat("--chat: %s", text.status().message()));
  }
  return text;
}

struct Prompt {
  std::vector<int32_t> tokens;
  bool chat = false;
  bool reasoning_open = false;  // the rendered prompt ends inside <think>
};

absl::StatusOr<Prompt> BuildPrompt(const Flags& flags, const model::Step35Model& model,
                                   const tokenizer::Tokenizer& tok) {
  Prompt prompt;
  const bool vocab_bos = tok.add_bos_token() && tok.bos_id() >= 0 && !flags.no_bos;
  if (flags.chat.empty()) {
    prompt.tokens = tok.Encode(flags.prompt, vocab_bos, flags.parse_special);
    return prompt;
  }
  prompt.chat = true;
  ASSIGN_OR_RETURN(std::string json, ChatJson(flags.chat));
  absl::StatusOr<ChatRequest> request = runner::ChatRequestFromJson(json);
  if (!request.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("--chat: %s", request.status().message()));
  }
  absl::StatusOr<std::string> source = model.file().metadata().GetString("tokenizer.chat_template");
  if (!source.ok()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("--chat: %s has no usable tokenizer.chat_template (%s)", flags.model,
                        source.status().message()));
  }
  ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::Create(*source));
  if (tok.bos_id() >= 0) request->bos_token = tok.TokenBytes(tok.bos_id());
  if (tok.eos_id() >= 0) request->eos_token = tok.TokenBytes(tok.eos_id());
  request->trim_message_content = true;  // Step loops on stray whitespace (llama.cpp #24181)
  absl::StatusOr<std::string> text = tmpl.Render(*request);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--chat: rendering the chat template: %s", text.status().message()));
  }
  // Templates that print bos_token themselves must not get a second one.
  const bool template_has_bos =
      !request->bos_token.empty() && text->rfind(request->bos_token, 0) == 0;
  // The template's own markers (<|im_start|>, <think>) are special tokens.
  prompt.tokens = tok.Encode(*text, vocab_bos && !template_has_bos, /*parse_special=*/true);
  const size_t end = text->find_last_not_of(" \t\r\n");
  prompt.reasoning_open =
      end != std::string::npos && end + 1 >= 7 && text->compare(end + 1 - 7, 7, "<think>") == 0;
  return prompt;
}

// Routes streamed chat text: reasoning to stderr (grey on a terminal), content to stdout.
class ChatPrinter {
 public:
  explicit ChatPrinter(bool reasoning_open)
      : stream_(reasoning_open), grey_(isatty(STDERR_FILENO) != 0) {}
  ~ChatPrinter() { EndReasoning(); }

  absl::Status Feed(std::string_view text) {
    ASSIGN_OR_RETURN(ChatOutputDelta delta, stream_.Feed(text));
    Print(delta);
    return absl::OkStatus();
  }
  absl::Status Finish() {
    ASSIGN_OR_RETURN(ChatOutputDelta delta, stream_.Finish());
    Print(delta);
    if (!tool_calls_.empty()) {
      jinja::Array calls;
      for (const ParsedToolCall& call : tool_calls_) {
        jinja::Object o;
        o.Set("name", jinja::Value::String(call.name));
        o.Set("arguments", call.arguments);
        calls.push_back(jinja::Value::MakeObject(std::move(o)));
      }
      jinja::Object root;
      root.Set("tool_calls", jinja::Value::MakeArray(std::move(calls)));
      ASSIGN_OR_RETURN(std::string json,
                       jinja::DumpJson(jinja::Value::MakeObject(std::move(root))));
      if (printed_content_) std::fputc('\n', stdout);
      std::printf("%s\n", json.c_str());
    }
    std::fflush(stdout);
    return absl::OkStatus();
  }

 private:
  void Print(const ChatOutputDelta& delta) {
    if (!delta.reasoning.empty()) {
      if (!in_reasoning_) {
        std::fprintf(stderr, "%sreasoning: ", grey_ ? "\x1b[90m" : "");
        in_reasoning_ = true;
      }
      std::fwrite(delta.reasoning.data(), 1, delta.reasoning.size(), stderr);
      std::fflush(stderr);
    }
    if (!delta.content.empty() || !delta.tool_calls.empty()) EndReasoning();
    if (!delta.content.empty()) {
      std::fwrite(delta.content.data(), 1, delta.content.size(), stdout);
      std::fflush(stdout);
      printed_content_ = true;
    }
    for (const ParsedToolCall& call : delta.tool_calls) tool_calls_.push_back(call);
  }
  void EndReasoning() {
    if (!in_reasoning_) return;
    std::fprintf(stderr, "%s\n", grey_ ? "\x1b[0m" : "");
    in_reasoning_ = false;
  }

  StepOutputStream stream_;
  bool grey_;
  bool in_reasoning_ = false;
  bool printed_content_ = false;
  std::vector<ParsedToolCall> tool_calls_;
};

// Flushes the decoder's held-back bytes and ends the text (chat: the parser's tail and tool
// calls; plain: a newline).
absl::Status FinishOutput(tokenizer::StreamingDecoder& decoder, std::unique_ptr<ChatPrinter>& chat,
                          absl::Status stream_status) {
  const std::string tail = decoder.Flush();
  if (chat) {
    if (stream_status.ok() && !tail.empty()) stream_status = chat->Feed(tail);
    if (stream_status.ok()) stream_status = chat->Finish();
    chat.reset();
    return stream_status;
  }
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::StatusOr<SamplingParams> MakeSamplingParams(const Flags& flags) {
  SamplingParams p;
  p.temperature = static_cast<float>(flags.temperature);
  p.top_k = static_cast<int32_t>(flags.top_k);
  p.top_p = static_cast<float>(flags.top_p);
  p.min_p = static_cast<float>(flags.min_p);
  p.repetition_penalty = static_cast<float>(flags.repeat_penalty);
  p.presence_penalty = static_cast<float>(flags.presence_penalty);
  p.frequency_penalty = static_cast<float>(flags.frequency_penalty);
  p.penalty_last_n = static_cast<int32_t>(flags.repeat_last_n);
  p.seed = flags.seed >= 0 ? static_cast<uint64_t>(flags.seed) : std::random_device{}();
  return p;
}

absl::Status RunGenerate(const Flags& flags) {
  if (flags.prompt.empty() == flags.chat.empty()) {
    return absl::InvalidArgumentError("give exactly one of --prompt and --chat");
  }
  if (flags.n_predict < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--n-predict must be at least 1, got %d", flags.n_predict));
  }
  if (flags.threads < 0 || flags.ctx_size < 0 || flags.prefill_chunk < 1) {
    return absl::InvalidArgumentError(
        "--threads and --ctx-size must be >= 0 and --prefill-chunk >= 1");
  }
  if (std::string error = ValidateBackendFlags(flags.backend); !error.empty()) {
    return absl::InvalidArgumentError(error);
  }
  const bool self_draft = !flags.draft.empty() && flags.draft == flags.model;
  const model::LoadOptions load{.backend = flags.backend.backend,
                                .device = static_cast<int>(flags.backend.device),
                                .num_threads = static_cast<int>(flags.threads),
                                .load_mtp = self_draft,
                                .progress = StderrLoadProgress()};
  absl::StatusOr<std::unique_ptr<model::Step35Model>> model =
      model::Step35Model::Load(flags.model, load);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrFormat("%s: %s", flags.model, model.status().message()));
  }
  std::fprintf(stderr, "%s\n", (*model)->hparams().Summary().c_str());
  ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok,
                   tokenizer::Tokenizer::FromMetadata((*model)->file().metadata()));
  ASSIGN_OR_RETURN(Prompt prompt, BuildPrompt(flags, **model, *tok));
  const int64_t n_ctx_train = (*model)->hparams().n_ctx_train;
  int64_t ctx = flags.ctx_size;
  if (ctx == 0) ctx = n_ctx_train > 0 ? std::min<int64_t>(4096, n_ctx_train) : 4096;
  if (n_ctx_train > 0 && ctx > n_ctx_train) {
    std::fprintf(stderr, "warning: --ctx-size %ld exceeds the model's training context %ld\n",
                 static_cast<long>(ctx), static_cast<long>(n_ctx_train));
  }
  if (static_cast<int64_t>(prompt.tokens.size()) >= ctx) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the prompt is %d tokens, which does not fit the context of %d tokens (--ctx-size); "
        "shorten the prompt or raise --ctx-size",
        prompt.tokens.size(), ctx));
  }
  ASSIGN_OR_RETURN(SamplingParams params, MakeSamplingParams(flags));
  std::fprintf(stderr, "prompt: %zu tokens, context %ld, seed %llu\n", prompt.tokens.size(),
               static_cast<long>(ctx), static_cast<unsigned long long>(params.seed));

  // Plain prompts hide control tokens unless --show-special. Chat output keeps them for the
  // parser (</think> and <tool_call> are control tokens) and drops only end-of-generation ones.
  tokenizer::StreamingDecoder decoder(*tok, !prompt.chat && !flags.show_special);
  std::unique_ptr<ChatPrinter> chat;
  if (prompt.chat) chat = std::make_unique<ChatPrinter>(prompt.reasoning_open);
  absl::Status stream_status;
  auto on_token = [&](int32_t token) {
    if (prompt.chat && tok->IsEndOfGeneration(token) && !flags.show_special) return;
    const std::string text = decoder.Push(token);
    if (text.empty()) return;
    if (chat) {
      if (stream_status.ok()) stream_status = chat->Feed(text);
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
  };
  if (!flags.draft.empty()) {
    std::unique_ptr<model::Step35Model> draft;
    if (!self_draft) {
      model::LoadOptions draft_load = load;
      draft_load.load_mtp = true;
      absl::StatusOr<std::unique_ptr<model::Step35Model>> loaded =
          model::Step35Model::Load(flags.draft, draft_load);
      if (!loaded.ok()) {
        return absl::Status(loaded.status().code(), absl::StrFormat("--draft %s: %s", flags.draft,
                                                                    loaded.status().message()));
      }
      draft = *std::move(loaded);
    }
    spec::SpeculativeOptions spec_options;
    spec_options.drafter.n_max = static_cast<int>(flags.draft_max);
    spec_options.prefill_chunk = static_cast<int32_t>(flags.prefill_chunk);
    spec_options.stop_tokens = tok->end_of_generation_ids();
    ASSIGN_OR_RETURN(std::unique_ptr<spec::SpeculativeGenerator> gen,
                     spec::SpeculativeGenerator::Create(model->get(), draft.get(), spec_options));
    // The generator sizes its KV for prompt + tokens, so the context bounds the token count.
    const int64_t room = ctx - static_cast<int64_t>(prompt.tokens.size());
    const int64_t limit = std::min(flags.n_predict, room);
    const auto start = std::chrono::steady_clock::now();
    double first_token_s = 0;
    int64_t emitted = 0;
    auto on_tokens = [&](std::span<const SampleResult> tokens) {
      if (emitted == 0) {
        first_token_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      for (const SampleResult& r : tokens) {
        on_token(r.token);
        ++emitted;
      }
      return true;
    };
    ASSIGN_OR_RETURN(spec::GenerationResult result,
                     gen->Generate(prompt.tokens, params, static_cast<int>(limit), on_tokens));
    const double total_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    RETURN_IF_ERROR(FinishOutput(decoder, chat, stream_status));
    const int64_t n = static_cast<int64_t>(result.tokens.size());
    const char* stop = result.stopped         ? "end of generation"
                       : n >= flags.n_predict ? "token limit"
                                              : "context full";
    std::fprintf(stderr, "stop: %s\n", stop);
    std::fprintf(stderr, "speculative: %s\n", result.stats.ToJson().c_str());
    std::fprintf(stderr, "speculative: acceptance %.3f, mean accepted length %.3f\n",
                 result.stats.acceptance_rate(), result.stats.mean_accepted_length());
    // The first emission comes after prefill and the first verification step, so the prompt
    // rate is slightly understated.
    std::fprintf(
        stderr, "summary: prompt %zu tokens, %.2f tokens/s; generated %ld tokens, %.2f tokens/s\n",
        prompt.tokens.size(), first_token_s > 0 ? prompt.tokens.size() / first_token_s : 0.0,
        static_cast<long>(n), total_s > first_token_s ? n / (total_s - first_token_s) : 0.0);
    return absl::OkStatus();
  }
  runner::GenerationOptions options{
      .ctx_size = ctx,
      .max_new_tokens = flags.n_predict,
      .prefill_chunk = static_cast<int32_t>(flags.prefill_chunk),
      .sampling = params,
      .is_end_of_generation = [&](int32_t t) { return tok->IsEndOfGeneration(t); }};
  ASSIGN_OR_RETURN(runner::GenerationStats stats,
                   runner::Generate(**model, prompt.tokens, options, on_token));
  RETURN_IF_ERROR(FinishOutput(decoder, chat, stream_status));
  std::fprintf(stderr, "stop: %s\n", std::string(runner::StopReasonName(stats.stop)).c_str());
  std::fprintf(stderr,
               "summary: prompt %ld tokens, %.2f tokens/s; generated %ld tokens, %.2f tokens/s\n",
               static_cast<long>(stats.prompt_tokens), stats.prompt_tokens_per_second(),
               static_cast<long>(stats.generated_tokens), stats.generation_tokens_per_second());
  return absl::OkStatus();
}

int Run(int argc, char** argv) {
  // The parser knows only --long flags; accept llama.cpp's -n.
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args) {
    if (a == "-n") a = "--n-predict";
  }
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());

  Flags f;
  ArgParser parser("stepserve generate", kDescription);
  parser.AddString("model", &f.model, "step35 GGUF file (first shard of a split set)", true);
  parser.AddString("prompt", &f.prompt, "prompt text");
  parser.AddString("chat", &f.chat, "chat request: JSON file or inline JSON");
  parser.AddInt("n-predict", &f.n_predict, "most tokens to generate (-n)");
  parser.AddDouble("temperature", &f.temperature, "sampling temperature; 0 = greedy");
  parser.AddInt("top-k", &f.top_k, "top-k (0 = off)");
  parser.AddDouble("top-p", &f.top_p, "top-p (1 = off)");
  parser.AddDouble("min-p", &f.min_p, "min-p (0 = off)");
  parser.AddDouble("repeat-penalty", &f.repeat_penalty, "repetition penalty (1 = off)");
  parser.AddInt("repeat-last-n", &f.repeat_last_n, "tokens the penalties look at (-1 = all)");
  parser.AddDouble("presence-penalty", &f.presence_penalty, "presence penalty (0 = off)");
  parser.AddDouble("frequency-penalty", &f.frequency_penalty, "frequency penalty (0 = off)");
  parser.AddInt("seed", &f.seed, "sampling seed (-1 = random, printed on stderr)");
  parser.AddInt("threads", &f.threads, "CPU threads (0 = all cores)");
  AddBackendFlags(parser, &f.backend);
  parser.AddInt("ctx-size", &f.ctx_size, "context positions (0 = min(4096, training context))");
  parser.AddInt("prefill-chunk", &f.prefill_chunk, "prompt tokens per forward pass");
  parser.AddBool("no-bos", &f.no_bos, "do not add BOS even when the vocabulary does");
  parser.AddBool("parse-special", &f.parse_special,
                 "map special-token texts in --prompt to their ids");
  parser.AddString("draft", &f.draft,
                   "MTP draft GGUF for speculative decoding (the --model file: its own heads)");
  parser.AddInt("draft-max", &f.draft_max, "most draft tokens per step");
  parser.AddBool("show-special", &f.show_special, "print control tokens' text");
  int exit_code = 0;
  if (!ParseOrExit(parser, static_cast<int>(ptrs.size()), ptrs.data(), &exit_code)) {
    return exit_code;
  }
  if (absl::Status status = RunGenerate(f); !status.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "generate: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

STEPSERVE_SUBCOMMAND("generate", "generate text from a step35 GGUF (prompt or chat)",
                     Run);

}  // namespace stepserve::cli
