// stepserve.v1.Inference on gRPC's callback API. Generation RPCs submit to the engine with a
// CallCore sink and return a reactor that writes one message at a time (streams) or the whole
// result (unary). Before the model is loaded every RPC is UNAVAILABLE; after BeginDrain new
// generation requests are UNAVAILABLE too. Auth (--auth-token-file) is checked here, so the
// health and reflection services on the same server stay exempt.
#ifndef STEPSERVE_SERVER_INFERENCE_SERVICE_H_
#define STEPSERVE_SERVER_INFERENCE_SERVICE_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "engine/runtime/engine.h"
#include "engine/tokenizer/chat_template.h"
#include "server/auth.h"
#include "server/call_core.h"
#include "server/convert.h"
#include "server/metrics.h"
#include "stepserve/v1/inference.grpc.pb.h"

namespace stepserve::server {

struct ServiceOptions {
  SamplingDefaults defaults;
  std::shared_ptr<BearerAuth> auth;  // null: no token required
  std::shared_ptr<Metrics> metrics;  // may be null (tests)
};

class InferenceService final : public pb::Inference::CallbackService {
 public:
  explicit InferenceService(ServiceOptions options);

  // The loaded, started engine (outlives the service's use of it: Stop the server first).
  // `chat_template` is the model's template (absent: Chat is FAILED_PRECONDITION).
  void SetEngine(engine::Engine* engine, std::optional<ChatTemplate> chat_template,
                 google::protobuf::Struct effective_config);
  // New generation requests get UNAVAILABLE from now on.
  void BeginDrain() { draining_ = true; }

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* ctx,
                                     const pb::GenerateRequest* request,
                                     pb::GenerateResult* response) override;
  grpc::ServerWriteReactor<pb::GenerateEvent>* GenerateStream(
      grpc::CallbackServerContext* ctx, const pb::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Chat(grpc::CallbackServerContext* ctx, const pb::ChatRequest* request,
                                 pb::ChatResult* response) override;
  grpc::ServerWriteReactor<pb::ChatEvent>* ChatStream(grpc::CallbackServerContext* ctx,
                                                      const pb::ChatRequest* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const pb::AbortRequest* request,
                                  pb::AbortResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx,
                                     const pb::TokenizeRequest* request,
                                     pb::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* ctx,
                                       const pb::DetokenizeRequest* request,
                                       pb::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx,
                                         const pb::GetModelInfoRequest* request,
                                         pb::ModelInfo* response) override;
  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* ctx,
                                    const pb::GetLoadRequest* request,
                                    pb::LoadReport* response) override;

  // Used by the reactors (generation_reactors.cc).
  struct Prepared {
    engine::GenerationRequest request;
    std::shared_ptr<CallCore> core;
  };
  // Auth, readiness and draining checks for any RPC; `generation` adds the draining check and
  // counts rejections.
  grpc::Status Admit(grpc::CallbackServerContext* ctx, bool generation);
  // Builds the engine request from a Generate / Chat request; registers the live id.
  absl::StatusOr<Prepared> PrepareGenerate(grpc::CallbackServerContext* ctx,
                                           const pb::GenerateRequest& request);
  absl::StatusOr<Prepared> PrepareChat(grpc::CallbackServerContext* ctx,
                                       const pb::ChatRequest& request);
  // Engine::Submit with rejection metrics; unregisters the id on failure.
  grpc::Status Submit(Prepared prepared);
  void CancelInEngine(const std::string& request_id);
  void Forget(const std::string& request_id);
  engine::Engine* engine() const { return engine_.load(); }
  Metrics* metrics() const { return options_.metrics.get(); }

 private:
  absl::Status RegisterId(std::string* request_id, const std::shared_ptr<CallCore>& core);
  absl::Status FinishPrepare(grpc::CallbackServerContext* ctx, std::vector<int32_t> prompt,
                             Prepared* out);
  void Reject(RejectReason reason);

  ServiceOptions options_;
  std::atomic<engine::Engine*> engine_{nullptr};
  std::atomic<bool> draining_{false};
  std::optional<ChatTemplate> chat_template_;
  google::protobuf::Struct effective_config_;
  std::atomic<uint64_t> next_id_{1};
  std::mutex live_mu_;
  absl::flat_hash_map<std::string, std::weak_ptr<CallCore>> live_;
};

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace stepserve::server

#endif  // STEPSERVE_SERVER_INFERENCE_SERVICE_H_
