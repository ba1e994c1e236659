// `stepserve serve`: the gRPC inference server (docs/serve-flags.md is the flag contract).
//
// Lifecycle: flags (exit 2 on a bad one) → metrics endpoint → gRPC listeners (liveness SERVING,
// readiness NOT_SERVING, Inference UNAVAILABLE) → load the model with progress → warm-up step →
// readiness SERVING. SIGTERM/SIGINT: readiness NOT_SERVING, new generation requests UNAVAILABLE,
// running requests get --drain-timeout-s to finish, the rest are aborted, exit 0. A second signal
// skips the wait.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/model/kv_storage.h"
#include "engine/runtime/engine.h"
#include "engine/tokenizer/chat_template.h"
#include "server/args.h"
#include "server/auth.h"
#include "server/cli/backend_flags.h"
#include "server/grpc_server.h"
#include "server/inference_service.h"
#include "server/metrics.h"
#include "server/stall_detector.h"
#include "server/subcommand.h"

#ifndef STEPSERVE_GIT_SHA
#define STEPSERVE_GIT_SHA "unknown"
#endif

namespace stepserve::cli {
namespace {

bool g_json_logs = false;

std::string JsonEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

// One line on stderr per event (text, or JSON with ts/level/msg for --log-format json).
void Log(const char* level, const std::string& msg) {
  if (g_json_logs) {
    const double ts =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::fprintf(stderr, "{\"ts\":%.3f,\"level\":\"%s\",\"msg\":\"%s\"}\n", ts, level,
                 JsonEscape(msg).c_str());
  } else {
    std::fprintf(stderr, "stepserve: %s\n", msg.c_str());
  }
  std::fflush(stderr);
}

int UsageError(const std::string& msg) {
  std::fprintf(stderr, "stepserve serve: %s\n", msg.c_str());
  return 2;
}

struct Flags {
  std::string model, draft, listen = "0.0.0.0:50051", metrics_listen = "0.0.0.0:9090";
  std::string health_listen, tls_cert, tls_key, auth_token_file;
  std::string prefix_cache = "on";
  std::string device_sampling = "auto";
  std::string kv_dtype = "auto";
  int64_t ctx_size = 0, kv_cache_blocks = 0, block_size = 16, max_running = 256;
  int64_t max_step_tokens = 8192, max_queue = 1024, threads = 0, top_k = 0;
  int64_t max_draft_tokens = -1, drain_timeout_s = 30, watchdog_s = 60;
  double kv_cache_gib = 0, gpu_memory_fraction = 0.92, temperature = 1.0, top_p = 1.0, min_p = 0;
  std::string devices, speculative = "auto", log_format = "text";
  BackendFlags backend;
};

// Range checks the parser cannot express; the message names the flag.
std::string Validate(const Flags& f, const ArgParser& p) {
  auto positive = [&](const char* name, int64_t v) -> std::string {
    return v < 1 ? absl::StrFormat("--%s must be at least 1, got %d", name, v) : "";
  };
  if (p.WasSet("ctx-size") && f.ctx_size < 1) return positive("ctx-size", f.ctx_size);
  if (f.kv_dtype != "auto" && !model::KvDtypeFromName(f.kv_dtype).ok()) {
    return absl::StrFormat("--kv-dtype must be auto, f32, f16 or q8_0, got \"%s\"", f.kv_dtype);
  }
  if (p.WasSet("kv-cache-gib") && f.kv_cache_gib <= 0) {
    return absl::StrFormat("--kv-cache-gib must be > 0, got %g", f.kv_cache_gib);
  }
  if (p.WasSet("kv-cache-blocks") && f.kv_cache_blocks < 1) {
    return positive("kv-cache-blocks", f.kv_cache_blocks);
  }
  if (p.WasSet("kv-cache-gib") && p.WasSet("kv-cache-blocks")) {
    return "--kv-cache-gib and --kv-cache-blocks are mutually exclusive";
  }
  if (f.block_size < 8 || f.block_size > 256 || (f.block_size & (f.block_size - 1)) != 0) {
    return absl::StrFormat("--block-size must be a power of two in [8, 256], got %d", f.block_size);
  }
  for (auto [name, v] : {std::pair<const char*, int64_t>{"max-running", f.max_running},
                         {"max-step-tokens", f.max_step_tokens},
                         {"max-queue", f.max_queue}}) {
    if (std::string e = positive(name, v); !e.empty()) return e;
  }
  if (p.WasSet("threads") && f.threads < 1) return positive("threads", f.threads);
  if (std::string e = ValidateBackendFlags(f.backend); !e.empty()) return e;
  if (!(f.gpu_memory_fraction > 0 && f.gpu_memory_fraction <= 1)) {
    return absl::StrFormat("--gpu-memory-fraction must be in (0, 1], got %g",
                           f.gpu_memory_fraction);
  }
  if (!(f.temperature >= 0))
    return absl::StrFormat("--temperature must be >= 0, got %g", f.temperature);
  if (!(f.top_p > 0 && f.top_p <= 1)) {
    return absl::StrFormat("--top-p must be in (0, 1], got %g", f.top_p);
  }
  if (f.top_k < 0) return absl::StrFormat("--top-k must be >= 0, got %d", f.top_k);
  if (!(f.min_p >= 0 && f.min_p < 1)) {
    return absl::StrFormat("--min-p must be in [0, 1), got %g", f.min_p);
  }
  if (f.speculative != "auto" && f.speculative != "off" && f.speculative != "on") {
    return absl::StrFormat("--speculative must be auto, off or on, got \"%s\"", f.speculative);
  }
  if (p.WasSet("max-draft-tokens") && f.max_draft_tokens < 1) {
    return positive("max-draft-tokens", f.max_draft_tokens);
  }
  if (f.drain_timeout_s < 0) {
    return absl::StrFormat("--drain-timeout-s must be >= 0, got %d", f.drain_timeout_s);
  }
  if (f.watchdog_s < 1) return positive("watchdog-s", f.watchdog_s);
  if (f.device_sampling != "auto" && f.device_sampling != "on" && f.device_sampling != "off") {
    return absl::StrFormat("--device-sampling must be auto, on or off, got \"%s\"",
                           f.device_sampling);
  }
  if (f.prefix_cache != "on" && f.prefix_cache != "off") {
    return absl::StrFormat("--prefix-cache must be on or off, got \"%s\"", f.prefix_cache);
  }
  if (f.log_format != "text" && f.log_format != "json") {
    return absl::StrFormat("--log-format must be text or json, got \"%s\"", f.log_format);
  }
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return "--tls-cert and --tls-key go together (both or neither)";
  }
  if (f.listen.empty()) return "--listen must not be empty";
  return "";
}

// --kv-dtype auto: F16 on a GPU backend, F32 on the CPU. Why: on the GPU F16 holds twice the
// tokens per GiB with decode steps within 0.6% of F32 either way (H100, 24 layers, session 38: 16 /
// 64 streams 10.655 / 25.927 ms against 10.717 / 25.907; H200, 4096-token contexts, session 10:
// batch 1 / 16 6.28 / 34.53 against 6.32 / 34.33), and the tensor-core decode attention
// (STEPSERVE_ATTN_MMA_DECODE) is 4.6% faster with it; llama.cpp and vLLM default to 16-bit caches
// too. The CPU backend keeps F32 (no conversion on every read).
std::string ResolvedKvDtype(const Flags& f) {
  if (f.kv_dtype != "auto") return f.kv_dtype;
  return f.backend.backend == "cpu" ? "f32" : "f16";
}

google::protobuf::Struct EffectiveConfig(const Flags& f, const engine::ModelInfo& info) {
  google::protobuf::Struct s;
  auto& m = *s.mutable_fields();
  m["model"].set_string_value(f.model);
  m["draft"].set_string_value(f.draft);
  m["listen"].set_string_value(f.listen);
  m["metrics_listen"].set_string_value(f.metrics_listen);
  m["health_listen"].set_string_value(f.health_listen);
  m["tls"].set_bool_value(!f.tls_cert.empty());
  m["auth"].set_bool_value(!f.auth_token_file.empty());
  m["ctx_size"].set_number_value(static_cast<double>(info.max_context));
  m["kv_cache_full_blocks"].set_number_value(static_cast<double>(info.kv_full_blocks));
  m["kv_cache_sliding_blocks"].set_number_value(static_cast<double>(info.kv_swa_blocks));
  m["kv_cache_bytes"].set_number_value(static_cast<double>(info.kv_bytes));
  m["block_size"].set_number_value(static_cast<double>(info.block_size));
  m["kv_dtype"].set_string_value(ResolvedKvDtype(f));
  m["prefix_cache"].set_string_value(f.prefix_cache);
  m["device_sampling"].set_string_value(f.device_sampling);
  m["max_running"].set_number_value(static_cast<double>(f.max_running));
  m["max_step_tokens"].set_number_value(static_cast<double>(f.max_step_tokens));
  m["max_queue"].set_number_value(static_cast<double>(f.max_queue));
  m["threads"].set_number_value(static_cast<double>(f.threads));
  m["devices"].set_string_value(f.devices.empty() ? "cpu" : f.devices);
  m["backend"].set_string_value(f.backend.backend);
  m["device"].set_number_value(static_cast<double>(f.backend.device));
  m["temperature"].set_number_value(f.temperature);
  m["top_p"].set_number_value(f.top_p);
  m["top_k"].set_number_value(static_cast<double>(f.top_k));
  m["min_p"].set_number_value(f.min_p);
  m["speculative"].set_string_value(f.speculative);
  m["drain_timeout_s"].set_number_value(static_cast<double>(f.drain_timeout_s));
  m["watchdog_s"].set_number_value(static_cast<double>(f.watchdog_s));
  return s;
}

// Waits up to `timeout` for SIGTERM/SIGINT (blocked in every thread); true if one came.
bool WaitSignal(const sigset_t& set, std::chrono::milliseconds timeout) {
  struct timespec ts;
  ts.tv_sec = timeout.count() / 1000;
  ts.tv_nsec = (timeout.count() % 1000) * 1000000L;
  return sigtimedwait(&set, nullptr, &ts) > 0;
}

int Run(int argc, char** argv) {
  Flags f;
  ArgParser p("stepserve serve",
              "Serves a step35 GGUF over gRPC (stepserve.v1.Inference, grpc.health.v1.Health,\n"
              "reflection) with Prometheus metrics. See docs/serve-flags.md.");
  p.AddString("model", &f.model, "GGUF file to serve (first shard of a split set)", true);
  p.AddString("draft", &f.draft, "separate draft model (GGUF)");
  p.AddString("listen", &f.listen, "gRPC listener HOST:PORT");
  p.AddString("metrics-listen", &f.metrics_listen, "HTTP /metrics listener (empty: off)");
  p.AddString("health-listen", &f.health_listen, "plaintext health-only gRPC listener");
  p.AddString("tls-cert", &f.tls_cert, "PEM certificate chain (with --tls-key)");
  p.AddString("tls-key", &f.tls_key, "PEM private key (with --tls-cert)");
  p.AddString("auth-token-file", &f.auth_token_file, "file holding the bearer token");
  p.AddInt("ctx-size", &f.ctx_size, "maximum tokens per sequence (default: engine's)");
  p.AddDouble("kv-cache-gib", &f.kv_cache_gib, "KV cache memory in GiB (default: auto)");
  p.AddInt("kv-cache-blocks", &f.kv_cache_blocks, "KV cache size in blocks (default: auto)");
  p.AddInt("block-size", &f.block_size, "tokens per KV block (power of two, 8..256)");
  p.AddString("kv-dtype", &f.kv_dtype,
              "auto | f32 | f16 | q8_0: element type of the KV cache (f16 holds twice the tokens "
              "per GiB of f32, q8_0 3.8x; auto: f16 on a GPU backend, f32 on the CPU)");
  p.AddString("prefix-cache", &f.prefix_cache, "on | off: share KV blocks of equal prefixes");
  p.AddString("device-sampling", &f.device_sampling,
              "auto | on | off: greedy steps take only each row's top entries from the backend "
              "(auto: on for a GPU backend)");
  p.AddInt("max-running", &f.max_running, "maximum sequences in the running batch");
  p.AddInt("max-step-tokens", &f.max_step_tokens, "token budget of one engine step");
  p.AddInt("max-queue", &f.max_queue, "maximum waiting requests");
  p.AddInt("threads", &f.threads, "host threads (default: all cores)");
  AddBackendFlags(p, &f.backend);
  p.AddString("devices", &f.devices, "CUDA device ordinals (0,1,..) or cpu");
  p.AddDouble("gpu-memory-fraction", &f.gpu_memory_fraction, "fraction (0, 1] of device memory");
  p.AddDouble("temperature", &f.temperature, "default temperature (0 = greedy)");
  p.AddDouble("top-p", &f.top_p, "default nucleus mass (0, 1]");
  p.AddInt("top-k", &f.top_k, "default top-k (0 = off)");
  p.AddDouble("min-p", &f.min_p, "default min-p [0, 1)");
  p.AddString("speculative", &f.speculative, "auto | off | on");
  p.AddInt("max-draft-tokens", &f.max_draft_tokens, "upper bound on draft length per step");
  p.AddInt("drain-timeout-s", &f.drain_timeout_s, "seconds running requests get after SIGTERM");
  p.AddInt("watchdog-s", &f.watchdog_s,
           "liveness turns NOT_SERVING when the engine has work but makes no step for this long");
  p.AddString("log-format", &f.log_format, "text | json");
  int exit_code = 0;
  if (!ParseOrExit(p, argc, argv, &exit_code)) return exit_code;
  if (std::string e = Validate(f, p); !e.empty()) return UsageError(e);
  if (!f.devices.empty() && f.devices != "cpu") {
    return UsageError(absl::StrFormat(
        "--devices %s: this build serves on the CPU only (use --devices cpu)", f.devices));
  }
  g_json_logs = f.log_format == "json";

  // Block the shutdown signals in every thread (threads inherit the mask) so sigtimedwait sees
  // them; ignore SIGPIPE (a client closing mid-write must not kill the process).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const auto start = std::chrono::steady_clock::now();

  std::shared_ptr<server::BearerAuth> auth;
  if (!f.auth_token_file.empty()) {
    auto a = server::BearerAuth::Create(f.auth_token_file);
    if (!a.ok()) return UsageError(std::string(a.status().message()));
    auth = *std::move(a);
  }
  auto metrics = server::Metrics::Create(f.metrics_listen, STEPSERVE_VERSION, STEPSERVE_GIT_SHA);
  if (!metrics.ok()) {
    Log("error", std::string(metrics.status().message()));
    return 1;
  }
  std::shared_ptr<server::Metrics> m = *metrics;

  server::ServiceOptions so;
  so.defaults = {static_cast<float>(f.temperature), static_cast<float>(f.top_p),
                 static_cast<int32_t>(f.top_k), static_cast<float>(f.min_p)};
  so.auth = auth;
  so.metrics = m;
  server::InferenceService service(so);
  auto grpc_server =
      server::GrpcServer::Start({f.listen, f.health_listen, f.tls_cert, f.tls_key}, &service, m);
  if (!grpc_server.ok()) {
    Log("error", std::string(grpc_server.status().message()));
    return 1;
  }
  server::GrpcServer& srv = **grpc_server;
  Log("info", absl::StrFormat("grpc listening on port %d%s", srv.port(),
                              f.tls_cert.empty() ? "" : " (TLS)"));
  if (srv.health_port() != 0) {
    Log("info", absl::StrFormat("health listening on port %d", srv.health_port()));
  }
  if (!m->ports().empty())
    Log("info", absl::StrFormat("metrics listening on port %d", m->ports()[0]));

  engine::EngineConfig ec;
  ec.model_path = f.model;
  ec.draft_path = f.draft;
  ec.backend = f.backend.backend;
  ec.device = static_cast<int>(f.backend.device);
  ec.threads = static_cast<int>(f.threads);
  ec.ctx_size = f.ctx_size;
  ec.kv_cache_gib = f.kv_cache_gib;
  ec.gpu_memory_fraction = f.gpu_memory_fraction;
  ec.kv_cache_blocks = f.kv_cache_blocks;
  ec.block_size = static_cast<int32_t>(f.block_size);
  ec.kv_dtype = *model::KvDtypeFromName(ResolvedKvDtype(f));  // checked in Validate
  ec.max_running = static_cast<int32_t>(f.max_running);
  ec.max_step_tokens = static_cast<int32_t>(f.max_step_tokens);
  ec.max_queue = static_cast<int32_t>(f.max_queue);
  ec.prefix_cache = f.prefix_cache == "on";
  // Auto: on where the logits live on a device (measured on the H200: 45-layer IQ4_XS decode at
  // batch 64 639 -> 652 tok/s, docs/cuda-engine.md); on the CPU it saves nothing.
  ec.device_sampling =
      f.device_sampling == "on" || (f.device_sampling == "auto" && f.backend.backend != "cpu");
  ec.observer = m;
  std::string last_phase;
  int last_decile = -1;
  auto progress = [&](std::string_view phase, uint64_t done, uint64_t total) {
    const int decile = total > 0 ? static_cast<int>(done * 10 / total) : 10;
    if (phase != last_phase || decile != last_decile) {
      last_phase = std::string(phase);
      last_decile = decile;
      Log("info",
          absl::StrFormat("loading: %s %d%% (%d / %d bytes)", phase, decile * 10, done, total));
    }
  };
  auto created = engine::Engine::Create(ec, progress);
  if (!created.ok()) {
    Log("error", absl::StrFormat("loading %s: %s", f.model, created.status().message()));
    return 1;
  }
  std::unique_ptr<engine::Engine> eng = *std::move(created);
  const engine::ModelInfo& info = eng->model_info();
  if (f.speculative == "on" && info.mtp_heads == 0 && f.draft.empty()) {
    Log("error", "--speculative on: the model has no MTP heads and no --draft was given");
    return 1;
  }
  if (absl::Status st = eng->Start(); !st.ok()) {
    Log("error", absl::StrFormat("warm-up step: %s", st.message()));
    return 1;
  }
  std::optional<ChatTemplate> chat_template;
  if (auto file = gguf::GgufFile::Open(f.model); file.ok()) {
    if (auto text = (*file)->metadata().GetString("tokenizer.chat_template"); text.ok()) {
      auto t = ChatTemplate::Create(*text);
      if (t.ok()) {
        chat_template = *std::move(t);
      } else {
        Log("warn", absl::StrFormat("tokenizer.chat_template does not parse (Chat disabled): %s",
                                    t.status().message()));
      }
    }
  }
  google::protobuf::Struct config = EffectiveConfig(f, info);
  service.SetEngine(eng.get(), std::move(chat_template), config);
  std::string config_json;
  for (const auto& [key, value] : config.fields()) {
    config_json +=
        absl::StrFormat(" %s=%s", key,
                        value.has_string_value() ? value.string_value()
                        : value.has_bool_value() ? (value.bool_value() ? "true" : "false")
                                                 : absl::StrFormat("%g", value.number_value()));
  }
  Log("info", absl::StrFormat("model %s (%s, %s): context %d, vocab %d; config:%s", info.name,
                              info.architecture, info.quantization, info.max_context,
                              info.vocab_size, config_json));
  m->SetModelInfo(info.name, info.architecture, info.quantization);
  m->SetKvCapacity(info.kv_full_blocks, info.kv_swa_blocks, info.block_size, info.kv_bytes);
  engine::Engine* engine_ptr = eng.get();
  m->SetBeforeScrape([engine_ptr, m_raw = m.get()] {
    const engine::LoadReport load = engine_ptr->GetLoad();
    m_raw->SetLoad(load.running, load.waiting, load.waiting_prompt_tokens);
  });
  m->SetModelLoadSeconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  srv.SetReady(true);
  m->SetReady(true);
  Log("info", "ready");

  server::StallDetector stall(std::chrono::seconds(f.watchdog_s));
  bool live = true;
  while (!WaitSignal(signals, std::chrono::milliseconds(1000))) {
    if (!eng->Healthy()) {
      srv.SetReady(false);
      m->SetReady(false);
    }
    const auto now = std::chrono::steady_clock::now();
    const bool stalled = stall.Update(now, !eng->Idle(), eng->GetLoad().steps);
    if (stalled == live) {  // the state changed
      live = !stalled;
      srv.SetLive(live);
      Log(live ? "info" : "error",
          live ? "engine loop progressing again: liveness SERVING"
               : absl::StrFormat(
                     "engine loop made no step for %d s with work queued: liveness "
                     "NOT_SERVING",
                     std::chrono::duration_cast<std::chrono::seconds>(stall.stalled_for(now))
                         .count()));
    }
  }
  // Drain: readiness goes first so load balancers stop routing before anything is refused.
  srv.SetReady(false);
  m->SetReady(false);
  m->SetDraining(true);
  service.BeginDrain();
  eng->BeginDrain();
  Log("info", absl::StrFormat("draining (up to %d s)", f.drain_timeout_s));
  const auto drain_deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(f.drain_timeout_s);
  bool skipped = false;
  while (!eng->Idle() && std::chrono::steady_clock::now() < drain_deadline) {
    if (WaitSignal(signals, std::chrono::milliseconds(20))) {
      skipped = true;
      break;
    }
  }
  if (!eng->Idle()) {
    Log("info", skipped ? "second signal: aborting what is left" : "drain timeout: aborting");
  }
  m->SetBeforeScrape({});
  eng->Stop();  // remaining requests end with finish_reason ABORT
  // Streams still writing their last messages get a moment, then the listeners close.
  srv.Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  eng.reset();
  Log("info", "stopped");
  return 0;
}

}  // namespace

STEPSERVE_SUBCOMMAND("serve", "serve a model over gRPC (see docs/serve-flags.md)", Run);

}  // namespace stepserve::cli
