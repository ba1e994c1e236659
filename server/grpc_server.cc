#include "server/grpc_server.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/convert.h"

namespace stepserve::server {
namespace {

namespace gx = grpc::experimental;

// Counts each call once, when its status goes out, by short method name and status code.
class CountingInterceptor : public gx::Interceptor {
 public:
  CountingInterceptor(gx::ServerRpcInfo* info, Metrics* metrics) : metrics_(metrics) {
    std::string_view full = info->method() != nullptr ? info->method() : "";
    const size_t slash = full.rfind('/');
    method_ = std::string(slash == std::string_view::npos ? full : full.substr(slash + 1));
  }
  void Intercept(gx::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(gx::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->OnGrpcDone(method_, StatusCodeName(methods->GetSendStatus().error_code()));
    }
    methods->Proceed();
  }

 private:
  Metrics* metrics_;
  std::string method_;
};

class CountingFactory : public gx::ServerInterceptorFactoryInterface {
 public:
  explicit CountingFactory(std::shared_ptr<Metrics> metrics) : metrics_(std::move(metrics)) {}
  gx::Interceptor* CreateServerInterceptor(gx::ServerRpcInfo* info) override {
    return new CountingInterceptor(info, metrics_.get());
  }

 private:
  std::shared_ptr<Metrics> metrics_;
};

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("%s %s: cannot open", flag, path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s %s: the file is empty", flag, path));
  }
  return ss.str();
}

void AddInterceptors(grpc::ServerBuilder& builder, const std::shared_ptr<Metrics>& metrics) {
  if (metrics == nullptr) return;
  std::vector<std::unique_ptr<gx::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<CountingFactory>(metrics));
  builder.experimental().SetInterceptorCreators(std::move(creators));
}

void SetReadiness(grpc::Server* server, bool ready) {
  if (server == nullptr || server->GetHealthCheckService() == nullptr) return;
  server->GetHealthCheckService()->SetServingStatus("readiness", ready);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const GrpcServerOptions& options,
                                                              InferenceService* service,
                                                              std::shared_ptr<Metrics> metrics) {
  std::unique_ptr<GrpcServer> out(new GrpcServer());
  grpc::EnableDefaultHealthCheckService(true);

  // The probe listener is built before reflection is enabled so it serves Health only.
  if (!options.health_listen.empty()) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options.health_listen, grpc::InsecureServerCredentials(),
                             &out->health_port_);
    AddInterceptors(builder, metrics);
    out->health_server_ = builder.BuildAndStart();
    if (out->health_server_ == nullptr || out->health_port_ == 0) {
      return absl::UnavailableError(
          absl::StrFormat("--health-listen %s: cannot listen", options.health_listen));
    }
  }

  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!options.tls_cert_path.empty()) {
    absl::StatusOr<std::string> cert = ReadFile("--tls-cert", options.tls_cert_path);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile("--tls-key", options.tls_key_path);
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, creds, &out->port_);
  builder.RegisterService(service);
  AddInterceptors(builder, metrics);
  out->server_ = builder.BuildAndStart();
  if (out->server_ == nullptr || out->port_ == 0) {
    return absl::UnavailableError(
        absl::StrFormat("--listen %s: cannot listen (address in use, or a bad TLS certificate/key)",
                        options.listen));
  }
  // "" and "liveness" are SERVING from the start (the built-in service serves "" already);
  // readiness waits for the model.
  for (grpc::Server* s : {out->server_.get(), out->health_server_.get()}) {
    if (s == nullptr || s->GetHealthCheckService() == nullptr) continue;
    s->GetHealthCheckService()->SetServingStatus("", true);
    s->GetHealthCheckService()->SetServingStatus("liveness", true);
    s->GetHealthCheckService()->SetServingStatus("readiness", false);
  }
  return out;
}

GrpcServer::~GrpcServer() { Shutdown(std::chrono::system_clock::now()); }

void GrpcServer::SetLive(bool live) {
  for (grpc::Server* server : {server_.get(), health_server_.get()}) {
    if (server == nullptr || server->GetHealthCheckService() == nullptr) continue;
    server->GetHealthCheckService()->SetServingStatus("", live);
    server->GetHealthCheckService()->SetServingStatus("liveness", live);
  }
}

void GrpcServer::SetReady(bool ready) {
  SetReadiness(server_.get(), ready);
  SetReadiness(health_server_.get(), ready);
}

void GrpcServer::Shutdown(std::chrono::system_clock::time_point deadline) {
  if (server_ != nullptr) {
    server_->Shutdown(deadline);
    server_->Wait();
    server_.reset();
  }
  if (health_server_ != nullptr) {
    health_server_->Shutdown(deadline);
    health_server_->Wait();
    health_server_.reset();
  }
}

}  // namespace stepserve::server
