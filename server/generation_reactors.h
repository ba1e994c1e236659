// Reactors of the four generation RPCs (Generate, GenerateStream, Chat, ChatStream). Each one
// submits its request with a CallCore sink and then only reacts: to the sink's kicks (events),
// write completions, and client cancellation / deadline (OnCancel → Engine::Cancel at once).
#ifndef STEPSERVE_SERVER_GENERATION_REACTORS_H_
#define STEPSERVE_SERVER_GENERATION_REACTORS_H_

#include "server/inference_service.h"

namespace stepserve::server {

grpc::ServerUnaryReactor* StartUnaryGenerate(InferenceService* service,
                                             grpc::CallbackServerContext* ctx,
                                             const pb::GenerateRequest& request,
                                             pb::GenerateResult* response);
grpc::ServerUnaryReactor* StartUnaryChat(InferenceService* service,
                                         grpc::CallbackServerContext* ctx,
                                         const pb::ChatRequest& request, pb::ChatResult* response);
// `admitted` is the service's admission result; a failure finishes the stream at once.
grpc::ServerWriteReactor<pb::GenerateEvent>* StartGenerateStream(InferenceService* service,
                                                                 grpc::CallbackServerContext* ctx,
                                                                 const pb::GenerateRequest& request,
                                                                 const grpc::Status& admitted);
grpc::ServerWriteReactor<pb::ChatEvent>* StartChatStream(InferenceService* service,
                                                         grpc::CallbackServerContext* ctx,
                                                         const pb::ChatRequest& request,
                                                         const grpc::Status& admitted);

}  // namespace stepserve::server

#endif  // STEPSERVE_SERVER_GENERATION_REACTORS_H_
