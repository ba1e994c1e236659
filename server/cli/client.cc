// `stepserve client`: a small command-line client of a running `stepserve serve` — streams one
// completion (GenerateStream) or chat reply (ChatStream) to stdout, or checks health.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/args.h"
#include "server/subcommand.h"
#include "stepserve/v1/inference.grpc.pb.h"

namespace stepserve::cli {
namespace {

namespace pb = ::stepserve::v1;

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

void PrintFinal(const pb::Final& f) {
  std::fprintf(stderr, "\n[finish=%s prompt_tokens=%u completion_tokens=%u ttft=%.3fs e2e=%.3fs]\n",
               pb::Final::FinishReason_Name(f.finish_reason()).c_str(), f.usage().prompt_tokens(),
               f.usage().completion_tokens(), f.timings().time_to_first_token_seconds(),
               f.timings().e2e_seconds());
}

int Run(int argc, char** argv) {
  std::string target = "127.0.0.1:50051", prompt, tls_ca, token_file, health;
  int64_t max_tokens = 32;
  double temperature = -1;
  bool chat = false;
  ArgParser p("stepserve client", "Streams one reply from a running `stepserve serve`.");
  p.AddString("target", &target, "server HOST:PORT");
  p.AddString("prompt", &prompt, "prompt text (with --chat: the user message)");
  p.AddBool("chat", &chat, "use ChatStream (the model's chat template) instead of GenerateStream");
  p.AddInt("max-tokens", &max_tokens, "maximum tokens to generate");
  p.AddDouble("temperature", &temperature, "sampling temperature (default: the server's)");
  p.AddString("tls-ca", &tls_ca, "PEM root certificate: connect with TLS");
  p.AddString("auth-token-file", &token_file, "send 'authorization: Bearer <file content>'");
  p.AddString("health", &health, "check this health service name instead (e.g. readiness)");
  int exit_code = 0;
  if (!ParseOrExit(p, argc, argv, &exit_code)) return exit_code;

  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!ReadFile(tls_ca, &ssl.pem_root_certs)) {
      std::fprintf(stderr, "stepserve client: --tls-ca %s: cannot read\n", tls_ca.c_str());
      return 2;
    }
    creds = grpc::SslCredentials(ssl);
  }
  auto channel = grpc::CreateChannel(target, creds);
  grpc::ClientContext ctx;
  if (!token_file.empty()) {
    std::string token;
    if (!ReadFile(token_file, &token)) {
      std::fprintf(stderr, "stepserve client: --auth-token-file %s: cannot read\n",
                   token_file.c_str());
      return 2;
    }
    ctx.AddMetadata("authorization", "Bearer " + std::string(absl::StripAsciiWhitespace(token)));
  }

  if (p.WasSet("health")) {
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(health);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status st = stub->Check(&ctx, req, &resp);
    if (!st.ok()) {
      std::fprintf(stderr, "stepserve client: %s\n", st.error_message().c_str());
      return 1;
    }
    std::printf("%s\n",
                grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()).c_str());
    return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
  }
  if (prompt.empty()) {
    std::fprintf(stderr, "stepserve client: --prompt is required\n");
    return 2;
  }
  auto stub = pb::Inference::NewStub(channel);
  pb::SamplingParams sampling;
  if (temperature >= 0) sampling.set_temperature(static_cast<float>(temperature));
  grpc::Status st;
  if (chat) {
    pb::ChatRequest req;
    pb::ChatMessage* msg = req.add_messages();
    msg->set_role("user");
    msg->set_content(prompt);
    *req.mutable_sampling() = sampling;
    req.mutable_stopping()->set_max_tokens(static_cast<uint32_t>(max_tokens));
    auto reader = stub->ChatStream(&ctx, req);
    pb::ChatEvent ev;
    while (reader->Read(&ev)) {
      if (ev.has_delta()) {
        if (!ev.delta().reasoning_content().empty()) {
          std::fprintf(stdout, "%s", ev.delta().reasoning_content().c_str());
        }
        std::fprintf(stdout, "%s", ev.delta().content().c_str());
        if (ev.delta().has_tool_call()) {
          std::fprintf(stdout, "\n[tool call %s(%s)]\n", ev.delta().tool_call().name().c_str(),
                       ev.delta().tool_call().arguments_json().c_str());
        }
        std::fflush(stdout);
      } else if (ev.has_final()) {
        PrintFinal(ev.final());
      }
    }
    st = reader->Finish();
  } else {
    pb::GenerateRequest req;
    req.set_text(prompt);
    *req.mutable_sampling() = sampling;
    req.mutable_stopping()->set_max_tokens(static_cast<uint32_t>(max_tokens));
    auto reader = stub->GenerateStream(&ctx, req);
    pb::GenerateEvent ev;
    while (reader->Read(&ev)) {
      if (ev.has_delta()) {
        std::fprintf(stdout, "%s", ev.delta().text().c_str());
        std::fflush(stdout);
      } else if (ev.has_final()) {
        PrintFinal(ev.final());
      }
    }
    st = reader->Finish();
  }
  if (!st.ok()) {
    std::fprintf(stderr, "stepserve client: %s: %s\n",
                 absl::StrFormat("code %d", static_cast<int>(st.error_code())).c_str(),
                 st.error_message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

STEPSERVE_SUBCOMMAND("client", "stream one reply from a running `stepserve serve`", Run);

}  // namespace stepserve::cli
