#include "server/generation_reactors.h"

#include <deque>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "engine/tokenizer/chat_output.h"
#include "engine/tokenizer/jinja_value.h"

namespace stepserve::server {
namespace {

// Turns a batch of engine events into outgoing messages. Sets `finish` once the call is over:
// OK after the Final message, or an error status (then nothing more is written).
template <typename Message>
using Converter = std::function<void(CallCore::Batch& batch, bool aborted, std::deque<Message>* out,
                                     std::optional<grpc::Status>* finish)>;

// Counts tokens as they are handed to gRPC (stepserve_generation_tokens_total).
class SentCounter {
 public:
  explicit SentCounter(Metrics* metrics) : metrics_(metrics) {}
  void Update(int32_t completion_tokens) {
    if (metrics_ != nullptr && completion_tokens > sent_) {
      metrics_->OnTokensSent(completion_tokens - sent_);
    }
    if (completion_tokens > sent_) sent_ = completion_tokens;
  }

 private:
  Metrics* metrics_;
  int32_t sent_ = 0;
};

void AddToolCall(const ParsedToolCall& call, int index, pb::ToolCall* out) {
  out->set_id(absl::StrFormat("call_%d", index));
  out->set_name(call.name);
  absl::StatusOr<std::string> args = jinja::DumpJson(call.arguments);
  out->set_arguments_json(args.ok() ? *args : "{}");
}

// One stream: writes one message at a time; the write token comes from CallCore's kick.
template <typename Message>
class StreamReactor final : public grpc::ServerWriteReactor<Message> {
 public:
  StreamReactor(InferenceService* service, std::shared_ptr<CallCore> core,
                Converter<Message> convert)
      : service_(service), core_(std::move(core)), convert_(std::move(convert)) {
    core_->SetKick([this] { Pump(); });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {  // the client went away mid-write
      core_->Detach();
      service_->CancelInEngine(core_->request_id());
      this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    Pump();
  }
  void OnCancel() override { service_->CancelInEngine(core_->request_id()); }
  void OnDone() override {
    service_->Forget(core_->request_id());
    delete this;
  }

 private:
  // Called by the holder of the write token (CallCore kick or a write completion).
  void Pump() {
    while (outbox_.empty()) {
      if (finish_.has_value()) {
        core_->Detach();
        this->Finish(*finish_);
        return;
      }
      CallCore::Batch batch;
      if (!core_->TakeOrRelease(&batch)) return;
      convert_(batch, core_->aborted.load(), &outbox_, &finish_);
    }
    current_ = std::move(outbox_.front());
    outbox_.pop_front();
    if (outbox_.empty() && finish_.has_value() && finish_->ok()) {
      core_->Detach();
      this->StartWriteAndFinish(&current_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    this->StartWrite(&current_);
  }

  InferenceService* service_;
  std::shared_ptr<CallCore> core_;
  Converter<Message> convert_;
  std::deque<Message> outbox_;
  std::optional<grpc::Status> finish_;
  Message current_;
};

// A unary generation call: accumulates, then finishes once.
class UnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  // `absorb` folds a batch into the response and returns the final status once finished.
  using Absorb = std::function<std::optional<grpc::Status>(CallCore::Batch&, bool aborted)>;
  UnaryReactor(InferenceService* service, std::shared_ptr<CallCore> core, Absorb absorb)
      : service_(service), core_(std::move(core)), absorb_(std::move(absorb)) {
    core_->SetKick([this] { Pump(); });
  }
  void OnCancel() override { service_->CancelInEngine(core_->request_id()); }
  void OnDone() override {
    service_->Forget(core_->request_id());
    delete this;
  }

 private:
  void Pump() {
    CallCore::Batch batch;
    while (core_->TakeOrRelease(&batch)) {
      std::optional<grpc::Status> done = absorb_(batch, core_->aborted.load());
      if (done.has_value()) {
        core_->Detach();
        Finish(*done);
        return;
      }
    }
  }
  InferenceService* service_;
  std::shared_ptr<CallCore> core_;
  Absorb absorb_;
};

// Shared driver: prepare → construct reactor → submit (finishing at once on failure).
template <typename Reactor, typename Prepare, typename Make>
Reactor* Launch(InferenceService* service, grpc::CallbackServerContext* ctx, Prepare prepare,
                Make make) {
  absl::StatusOr<InferenceService::Prepared> prepared = prepare();
  if (!prepared.ok()) {
    auto* reactor = make(std::make_shared<CallCore>(""));
    reactor->Finish(ToGrpcStatus(prepared.status()));
    return reactor;
  }
  auto* reactor = make(prepared->core);
  grpc::Status st = service->Submit(*std::move(prepared));
  if (!st.ok()) reactor->Finish(st);
  return reactor;
}

// --- Generate / GenerateStream -------------------------------------------------------------

Converter<pb::GenerateEvent> GenerateConverter(const pb::GenerateRequest& request, Metrics* m) {
  const bool ids = request.output().return_token_ids();
  const bool lps = request.output().return_logprobs();
  auto sent = std::make_shared<SentCounter>(m);
  return [ids, lps, sent](CallCore::Batch& b, bool aborted, std::deque<pb::GenerateEvent>* out,
                          std::optional<grpc::Status>* finish) {
    if (b.started) ToProto(*b.started, out->emplace_back().mutable_started());
    if (b.has_delta) {
      AppendDelta(b.delta, ids, lps, out->emplace_back().mutable_delta());
      sent->Update(b.delta.completion_tokens);
    }
    if (b.finished) {
      absl::Status st = FinishStatus(*b.finished, aborted);
      if (!st.ok()) {
        out->clear();
        *finish = ToGrpcStatus(st);
        return;
      }
      ToProto(*b.finished, aborted, out->emplace_back().mutable_final());
      *finish = grpc::Status::OK;
    }
  };
}

template <typename Message>
void StampIds(std::deque<Message>* out, const std::string& request_id) {
  for (Message& m : *out) m.set_request_id(request_id);
}

// --- Chat / ChatStream ---------------------------------------------------------------------

// Splits generated text into reasoning / content / tool calls as it streams.
struct ChatSplitter {
  StepOutputStream parser{/*reasoning_open=*/true};
  int tool_calls = 0;
  // Appends the parsed pieces of `text` (or of the held-back rest when `final`).
  absl::Status Feed(std::string_view text, bool final, int32_t completion_tokens,
                    std::deque<pb::ChatEvent>* out) {
    absl::StatusOr<ChatOutputDelta> d = final ? parser.Finish() : parser.Feed(text);
    if (!d.ok()) return d.status();
    if (!d->content.empty() || !d->reasoning.empty()) {
      pb::ChatDelta* delta = out->emplace_back().mutable_delta();
      delta->set_content(d->content);
      delta->set_reasoning_content(d->reasoning);
      delta->set_completion_tokens(completion_tokens);
    }
    for (const ParsedToolCall& call : d->tool_calls) {
      pb::ChatDelta* delta = out->emplace_back().mutable_delta();
      AddToolCall(call, tool_calls++, delta->mutable_tool_call());
      delta->set_completion_tokens(completion_tokens);
    }
    return absl::OkStatus();
  }
};

Converter<pb::ChatEvent> ChatConverter(Metrics* m) {
  auto splitter = std::make_shared<ChatSplitter>();
  auto sent = std::make_shared<SentCounter>(m);
  auto completion = std::make_shared<int32_t>(0);
  return
      [splitter, sent, completion](CallCore::Batch& b, bool aborted, std::deque<pb::ChatEvent>* out,
                                   std::optional<grpc::Status>* finish) {
        if (b.started) ToProto(*b.started, out->emplace_back().mutable_started());
        if (b.has_delta) {
          *completion = b.delta.completion_tokens;
          sent->Update(b.delta.completion_tokens);
          absl::Status st = splitter->Feed(b.delta.text, false, *completion, out);
          if (!st.ok()) {
            *finish = grpc::Status(grpc::StatusCode::INTERNAL,
                                   absl::StrFormat("parsing the model output: %s", st.message()));
            return;
          }
        }
        if (b.finished) {
          absl::Status st = FinishStatus(*b.finished, aborted);
          if (st.ok()) st = splitter->Feed("", true, *completion, out);
          if (!st.ok()) {
            out->clear();
            *finish = ToGrpcStatus(st);
            return;
          }
          ToProto(*b.finished, aborted, out->emplace_back().mutable_final());
          *finish = grpc::Status::OK;
        }
      };
}

}  // namespace

grpc::ServerWriteReactor<pb::GenerateEvent>* StartGenerateStream(InferenceService* service,
                                                                 grpc::CallbackServerContext* ctx,
                                                                 const pb::GenerateRequest& request,
                                                                 const grpc::Status& admitted) {
  using R = StreamReactor<pb::GenerateEvent>;
  auto make = [&](std::shared_ptr<CallCore> core) {
    const std::string id = core->request_id();
    Converter<pb::GenerateEvent> inner = GenerateConverter(request, service->metrics());
    return new R(service, std::move(core),
                 [inner, id](CallCore::Batch& b, bool aborted, std::deque<pb::GenerateEvent>* out,
                             std::optional<grpc::Status>* finish) {
                   inner(b, aborted, out, finish);
                   StampIds(out, id);
                 });
  };
  if (!admitted.ok()) {
    R* r = make(std::make_shared<CallCore>(""));
    r->Finish(admitted);
    return r;
  }
  return Launch<R>(
      service, ctx, [&] { return service->PrepareGenerate(ctx, request); }, make);
}

grpc::ServerWriteReactor<pb::ChatEvent>* StartChatStream(InferenceService* service,
                                                         grpc::CallbackServerContext* ctx,
                                                         const pb::ChatRequest& request,
                                                         const grpc::Status& admitted) {
  using R = StreamReactor<pb::ChatEvent>;
  auto make = [&](std::shared_ptr<CallCore> core) {
    const std::string id = core->request_id();
    Converter<pb::ChatEvent> inner = ChatConverter(service->metrics());
    return new R(service, std::move(core),
                 [inner, id](CallCore::Batch& b, bool aborted, std::deque<pb::ChatEvent>* out,
                             std::optional<grpc::Status>* finish) {
                   inner(b, aborted, out, finish);
                   StampIds(out, id);
                 });
  };
  if (!admitted.ok()) {
    R* r = make(std::make_shared<CallCore>(""));
    r->Finish(admitted);
    return r;
  }
  return Launch<R>(
      service, ctx, [&] { return service->PrepareChat(ctx, request); }, make);
}

grpc::ServerUnaryReactor* StartUnaryGenerate(InferenceService* service,
                                             grpc::CallbackServerContext* ctx,
                                             const pb::GenerateRequest& request,
                                             pb::GenerateResult* response) {
  auto make = [&](std::shared_ptr<CallCore> core) {
    response->set_request_id(core->request_id());
    Converter<pb::GenerateEvent> convert = GenerateConverter(request, service->metrics());
    return new UnaryReactor(
        service, std::move(core),
        [convert, response](CallCore::Batch& b, bool aborted) -> std::optional<grpc::Status> {
          std::deque<pb::GenerateEvent> events;
          std::optional<grpc::Status> finish;
          convert(b, aborted, &events, &finish);
          for (pb::GenerateEvent& e : events) {
            if (e.has_delta()) {
              response->mutable_text()->append(e.delta().text());
              response->mutable_token_ids()->MergeFrom(e.delta().token_ids());
              response->mutable_logprobs()->MergeFrom(e.delta().logprobs());
            } else if (e.has_final()) {
              *response->mutable_final() = std::move(*e.mutable_final());
            }
          }
          return finish;
        });
  };
  return Launch<UnaryReactor>(
      service, ctx, [&] { return service->PrepareGenerate(ctx, request); }, make);
}

grpc::ServerUnaryReactor* StartUnaryChat(InferenceService* service,
                                         grpc::CallbackServerContext* ctx,
                                         const pb::ChatRequest& request, pb::ChatResult* response) {
  auto make = [&](std::shared_ptr<CallCore> core) {
    response->set_request_id(core->request_id());
    response->mutable_message()->set_role("assistant");
    Converter<pb::ChatEvent> convert = ChatConverter(service->metrics());
    return new UnaryReactor(
        service, std::move(core),
        [convert, response](CallCore::Batch& b, bool aborted) -> std::optional<grpc::Status> {
          std::deque<pb::ChatEvent> events;
          std::optional<grpc::Status> finish;
          convert(b, aborted, &events, &finish);
          pb::ChatMessage* msg = response->mutable_message();
          for (pb::ChatEvent& e : events) {
            if (e.has_delta()) {
              msg->mutable_content()->append(e.delta().content());
              msg->mutable_reasoning_content()->append(e.delta().reasoning_content());
              if (e.delta().has_tool_call()) *msg->add_tool_calls() = e.delta().tool_call();
            } else if (e.has_final()) {
              *response->mutable_final() = std::move(*e.mutable_final());
            }
          }
          return finish;
        });
  };
  return Launch<UnaryReactor>(
      service, ctx, [&] { return service->PrepareChat(ctx, request); }, make);
}

}  // namespace stepserve::server
