#include "server/inference_service.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/generation_reactors.h"

namespace stepserve::server {
namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

InferenceService::InferenceService(ServiceOptions options) : options_(std::move(options)) {}

void InferenceService::SetEngine(engine::Engine* engine, std::optional<ChatTemplate> chat_template,
                                 google::protobuf::Struct effective_config) {
  chat_template_ = std::move(chat_template);
  effective_config_ = std::move(effective_config);
  engine_.store(engine);  // published last: readers see the template once they see the engine
}

void InferenceService::Reject(RejectReason reason) {
  if (options_.metrics != nullptr) options_.metrics->OnRejected(reason);
}

grpc::Status InferenceService::Admit(grpc::CallbackServerContext* ctx, bool generation) {
  if (options_.auth != nullptr) {
    std::string_view value;
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it != md.end()) value = std::string_view(it->second.data(), it->second.size());
    absl::Status st = options_.auth->Check(value);
    if (!st.ok()) {
      Reject(RejectReason::kUnauthenticated);
      return ToGrpcStatus(st);
    }
  }
  if (engine_.load() == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the model is still loading");
  }
  if (generation && draining_.load()) {
    Reject(RejectReason::kDraining);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is draining (shutting down)");
  }
  return grpc::Status::OK;
}

absl::Status InferenceService::RegisterId(std::string* request_id,
                                          const std::shared_ptr<CallCore>& core) {
  std::lock_guard<std::mutex> lock(live_mu_);
  auto [it, inserted] = live_.try_emplace(*request_id, core);
  if (!inserted) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request_id \"%s\" is already in use by a live request", *request_id));
  }
  return absl::OkStatus();
}

void InferenceService::Forget(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(live_mu_);
  live_.erase(request_id);
}

absl::Status InferenceService::FinishPrepare(grpc::CallbackServerContext* ctx,
                                             std::vector<int32_t> prompt, Prepared* out) {
  engine::Engine* eng = engine_.load();
  const int64_t context = eng->model_info().max_context;
  if (static_cast<int64_t>(prompt.size()) >= context) {
    Reject(RejectReason::kTooLong);
    return absl::InvalidArgumentError(absl::StrFormat(
        "prompt has %d tokens; the context holds %d (prompt plus at least one generated token)",
        prompt.size(), context));
  }
  out->request.prompt = std::move(prompt);
  // The client deadline also bounds queueing (architecture.md section 4).
  const auto deadline = ctx->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    const auto remaining = deadline - std::chrono::system_clock::now();
    out->request.deadline =
        std::chrono::steady_clock::now() +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(remaining);
  }
  if (out->request.request_id.empty()) {
    out->request.request_id = absl::StrFormat("req-%d", next_id_.fetch_add(1));
  }
  out->core = std::make_shared<CallCore>(out->request.request_id);
  return RegisterId(&out->request.request_id, out->core);
}

absl::StatusOr<InferenceService::Prepared> InferenceService::PrepareGenerate(
    grpc::CallbackServerContext* ctx, const pb::GenerateRequest& request) {
  engine::Engine* eng = engine_.load();
  Prepared out;
  out.request.request_id = request.request_id();
  absl::Status st = FillGenerationOptions(
      request.sampling(), request.stopping(), request.output(), request.speculation(),
      request.priority(), options_.defaults, eng->tokenizer().vocab_size(), &out.request);
  absl::StatusOr<std::vector<int32_t>> prompt =
      st.ok() ? PromptTokens(request, eng->tokenizer()) : absl::StatusOr<std::vector<int32_t>>(st);
  if (!prompt.ok()) {
    Reject(RejectReason::kInvalid);
    return prompt.status();
  }
  if (absl::Status s = FinishPrepare(ctx, *std::move(prompt), &out); !s.ok()) return s;
  return out;
}

absl::StatusOr<InferenceService::Prepared> InferenceService::PrepareChat(
    grpc::CallbackServerContext* ctx, const pb::ChatRequest& request) {
  engine::Engine* eng = engine_.load();
  if (!chat_template_.has_value()) {
    return absl::FailedPreconditionError("the model has no tokenizer.chat_template");
  }
  const tokenizer::Tokenizer& tok = eng->tokenizer();
  Prepared out;
  out.request.request_id = request.request_id();
  absl::Status st = FillGenerationOptions(request.sampling(), request.stopping(), request.output(),
                                          request.speculation(), request.priority(),
                                          options_.defaults, tok.vocab_size(), &out.request);
  absl::StatusOr<ChatRequest> chat =
      st.ok() ? ToChatRequest(request) : absl::StatusOr<ChatRequest>(st);
  if (!chat.ok()) {
    Reject(RejectReason::kInvalid);
    return chat.status();
  }
  if (tok.bos_id() >= 0) chat->bos_token = tok.TokenBytes(tok.bos_id());
  if (tok.eos_id() >= 0) chat->eos_token = tok.TokenBytes(tok.eos_id());
  absl::StatusOr<std::string> text = chat_template_->Render(*chat);
  if (!text.ok()) {
    Reject(RejectReason::kInvalid);
    return absl::InvalidArgumentError(
        absl::StrFormat("messages: the chat template failed: %s", text.status().message()));
  }
  // The template writes BOS itself; special-token texts in it must become their ids.
  std::vector<int32_t> prompt = tok.Encode(*text, /*add_bos=*/false, /*parse_special=*/true);
  if (absl::Status s = FinishPrepare(ctx, std::move(prompt), &out); !s.ok()) return s;
  return out;
}

grpc::Status InferenceService::Submit(Prepared prepared) {
  const std::string id = prepared.request.request_id;
  absl::Status st = engine_.load()->Submit(std::move(prepared.request), prepared.core);
  if (st.ok()) return grpc::Status::OK;
  Forget(id);
  switch (st.code()) {
    case absl::StatusCode::kResourceExhausted:
      Reject(RejectReason::kQueueFull);
      break;
    case absl::StatusCode::kUnavailable:
      Reject(RejectReason::kDraining);
      break;
    default:
      Reject(RejectReason::kInvalid);
      break;
  }
  return ToGrpcStatus(st);
}

void InferenceService::CancelInEngine(const std::string& request_id) {
  engine::Engine* eng = engine_.load();
  if (eng != nullptr) eng->Cancel(request_id);
}

grpc::ServerUnaryReactor* InferenceService::Generate(grpc::CallbackServerContext* ctx,
                                                     const pb::GenerateRequest* request,
                                                     pb::GenerateResult* response) {
  if (grpc::Status s = Admit(ctx, true); !s.ok()) return Done(ctx, s);
  return StartUnaryGenerate(this, ctx, *request, response);
}

grpc::ServerWriteReactor<pb::GenerateEvent>* InferenceService::GenerateStream(
    grpc::CallbackServerContext* ctx, const pb::GenerateRequest* request) {
  return StartGenerateStream(this, ctx, *request, Admit(ctx, true));
}

grpc::ServerUnaryReactor* InferenceService::Chat(grpc::CallbackServerContext* ctx,
                                                 const pb::ChatRequest* request,
                                                 pb::ChatResult* response) {
  if (grpc::Status s = Admit(ctx, true); !s.ok()) return Done(ctx, s);
  return StartUnaryChat(this, ctx, *request, response);
}

grpc::ServerWriteReactor<pb::ChatEvent>* InferenceService::ChatStream(
    grpc::CallbackServerContext* ctx, const pb::ChatRequest* request) {
  return StartChatStream(this, ctx, *request, Admit(ctx, true));
}

grpc::ServerUnaryReactor* InferenceService::Abort(grpc::CallbackServerContext* ctx,
                                                  const pb::AbortRequest* request,
                                                  pb::AbortResponse* response) {
  if (grpc::Status s = Admit(ctx, false); !s.ok()) return Done(ctx, s);
  for (const std::string& id : request->request_ids()) {
    std::shared_ptr<CallCore> core;
    {
      std::lock_guard<std::mutex> lock(live_mu_);
      auto it = live_.find(id);
      if (it != live_.end()) core = it->second.lock();
    }
    if (core != nullptr) core->aborted = true;
    if (engine_.load()->Cancel(id)) response->add_aborted(id);
  }
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(grpc::CallbackServerContext* ctx,
                                                     const pb::TokenizeRequest* request,
                                                     pb::TokenizeResponse* response) {
  if (grpc::Status s = Admit(ctx, false); !s.ok()) return Done(ctx, s);
  const tokenizer::Tokenizer& tok = engine_.load()->tokenizer();
  const bool add_bos = (request->has_add_bos() ? request->add_bos() : true) && tok.add_bos_token();
  for (int32_t id : tok.Encode(request->text(), add_bos, request->parse_special())) {
    response->add_ids(static_cast<uint32_t>(id));
  }
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::Detokenize(grpc::CallbackServerContext* ctx,
                                                       const pb::DetokenizeRequest* request,
                                                       pb::DetokenizeResponse* response) {
  if (grpc::Status s = Admit(ctx, false); !s.ok()) return Done(ctx, s);
  const tokenizer::Tokenizer& tok = engine_.load()->tokenizer();
  std::vector<int32_t> ids;
  for (int i = 0; i < request->ids_size(); ++i) {
    if (request->ids(i) >= static_cast<uint32_t>(tok.vocab_size())) {
      return Done(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    absl::StrFormat("ids[%d] = %u is outside the vocabulary (%d)",
                                                    i, request->ids(i), tok.vocab_size())));
    }
    ids.push_back(static_cast<int32_t>(request->ids(i)));
  }
  const bool skip = request->has_skip_special_tokens() ? request->skip_special_tokens() : true;
  response->set_text(ToValidUtf8(tok.Decode(ids, skip)));
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::GetModelInfo(grpc::CallbackServerContext* ctx,
                                                         const pb::GetModelInfoRequest*,
                                                         pb::ModelInfo* response) {
  if (grpc::Status s = Admit(ctx, false); !s.ok()) return Done(ctx, s);
  const engine::ModelInfo& info = engine_.load()->model_info();
  response->set_model_name(info.name);
  response->set_architecture(info.architecture);
  response->set_quantization(info.quantization);
  response->set_max_context(static_cast<uint32_t>(info.max_context));
  response->set_vocab_size(static_cast<uint32_t>(info.vocab_size));
  for (int32_t id : info.eos_token_ids) response->add_eos_token_ids(static_cast<uint32_t>(id));
  response->set_mtp_heads(static_cast<uint32_t>(info.mtp_heads));
  *response->mutable_effective_config() = effective_config_;
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::GetLoad(grpc::CallbackServerContext* ctx,
                                                    const pb::GetLoadRequest*,
                                                    pb::LoadReport* response) {
  if (grpc::Status s = Admit(ctx, false); !s.ok()) return Done(ctx, s);
  const engine::LoadReport load = engine_.load()->GetLoad();
  response->set_running_requests(load.running);
  response->set_waiting_requests(load.waiting);
  response->set_max_running_requests(load.max_running);
  response->set_kv_cache_usage(load.kv_usage);
  response->set_kv_cache_capacity_tokens(load.kv_capacity_tokens);
  response->set_waiting_prompt_tokens(load.waiting_prompt_tokens);
  response->set_prefix_cache_hit_rate(load.prefix_cache_hit_rate);
  response->set_speculative_acceptance_rate(load.spec_acceptance_rate);
  response->set_draining(load.draining || draining_.load());
  return Done(ctx, grpc::Status::OK);
}

}  // namespace stepserve::server
