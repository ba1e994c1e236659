// The gRPC listeners of `stepserve serve`: --listen (Inference + Health + reflection, optional TLS)
// and the optional plaintext --health-listen (Health only). Health uses gRPC's built-in service;
// an interceptor counts every completed call for stepserve_grpc_requests_total.
#ifndef STEPSERVE_SERVER_GRPC_SERVER_H_
#define STEPSERVE_SERVER_GRPC_SERVER_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"
#include "server/inference_service.h"
#include "server/metrics.h"

namespace stepserve::server {

struct GrpcServerOptions {
  std::string listen;         // HOST:PORT (port 0: pick one, see port())
  std::string health_listen;  // "" = none
  std::string tls_cert_path;  // both or neither
  std::string tls_key_path;
};

class GrpcServer {
 public:
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const GrpcServerOptions& options,
                                                           InferenceService* service,
                                                           std::shared_ptr<Metrics> metrics);
  ~GrpcServer();

  int port() const { return port_; }
  int health_port() const { return health_port_; }
  // Sets the "readiness" health status on every listener ("" and "liveness" stay SERVING).
  void SetReady(bool ready);
  // Sets the "liveness" (and "") health status on every listener: false when the engine loop is
  // wedged (docs/serve-flags.md, Health).
  void SetLive(bool live);
  // Graceful shutdown: calls in flight get until `deadline` to finish, then are cancelled.
  void Shutdown(std::chrono::system_clock::time_point deadline);

 private:
  GrpcServer() = default;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_server_;
  int port_ = 0;
  int health_port_ = 0;
};

}  // namespace stepserve::server

#endif  // STEPSERVE_SERVER_GRPC_SERVER_H_
