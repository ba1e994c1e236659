#include "server/metrics.h"

#include <exception>
#include <utility>

#include "absl/strings/str_format.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace stepserve::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using Buckets = prometheus::Histogram::BucketBoundaries;

// Bucket sets from docs/metrics.md "Histogram buckets".
const Buckets& TtftBuckets() {
  static const Buckets b = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1,   2.5,
                            5,    7.5,   10,   20,  40,   80,  160,  640, 2560};
  return b;
}
const Buckets& TokenLatencyBuckets() {
  static const Buckets b = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075,
                            0.1,   0.15,   0.2,   0.3,  0.5,  0.75, 1,    2.5,  5};
  return b;
}
const Buckets& RequestTimeBuckets() {
  static const Buckets b = {0.1, 0.25, 0.5, 1,   2.5, 5,   10,  15,   20,  30,
                            40,  50,   60,  120, 240, 480, 960, 1920, 7680};
  return b;
}
const Buckets& TokenCountBuckets() {
  static const Buckets b = {1,    2,    5,    10,    20,    50,    100,    200,    500,
                            1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000};
  return b;
}
const Buckets& StepDurationBuckets() {
  static const Buckets b = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                            0.1,    0.25,  0.5,    1,     2.5,  5};
  return b;
}
const Buckets& DraftLengthBuckets() {
  static const Buckets b = {0, 1, 2, 3, 4, 5, 6, 8, 16};
  return b;
}

// RPC names pre-created (code OK) so the series exist from start-up.
constexpr const char* kRpcNames[] = {"Generate", "GenerateStream", "Chat",       "ChatStream",
                                     "Abort",    "Tokenize",       "Detokenize", "GetModelInfo",
                                     "GetLoad",  "Check",          "Watch"};
// Draft positions pre-created: Step-3.5/3.7 have 3 MTP heads, --draft defaults to 4 tokens.
constexpr int kPreCreatedDraftPositions = 4;

}  // namespace

// Runs a callback before delegating the scrape to the registry (prometheus-cpp has no pre-scrape
// hook), so gauges that mirror engine state are fresh without a polling thread.
class Metrics::ScrapeHook : public prometheus::Collectable {
 public:
  explicit ScrapeHook(std::shared_ptr<prometheus::Registry> registry)
      : registry_(std::move(registry)) {}
  void Set(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = std::move(fn);
  }
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn = fn_;
    }
    if (fn) fn();
    return registry_->Collect();
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  mutable std::mutex mu_;
  std::function<void()> fn_;
};

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  hook_ = std::make_shared<ScrapeHook>(registry_);
}

Metrics::~Metrics() {
  if (exposer_ != nullptr) exposer_->RemoveCollectable(hook_);
}

absl::StatusOr<std::shared_ptr<Metrics>> Metrics::Create(const std::string& listen,
                                                         const std::string& version,
                                                         const std::string& git_sha) {
  std::shared_ptr<Metrics> metrics(new Metrics());
  metrics->Declare(version, git_sha);
  if (!listen.empty()) {
    // civetweb wants "HOST:PORT" for IPv4 and "[ADDR]:PORT" for IPv6, as --metrics-listen takes.
    try {
      metrics->exposer_ = std::make_unique<prometheus::Exposer>(listen);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrFormat("--metrics-listen %s: cannot listen: %s", listen, e.what()));
    }
    metrics->exposer_->RegisterCollectable(metrics->hook_);
  }
  return metrics;
}

std::vector<int> Metrics::ports() const {
  if (exposer_ == nullptr) return {};
  return exposer_->GetListeningPorts();
}

void Metrics::SetBeforeScrape(std::function<void()> fn) { hook_->Set(std::move(fn)); }

void Metrics::Declare(const std::string& version, const std::string& git_sha) {
  auto& r = *registry_;
  auto gauge = [&](const char* name, const char* help) -> prometheus::Gauge* {
    return &BuildGauge().Name(name).Help(help).Register(r).Add({});
  };
  auto counter = [&](const char* name, const char* help) -> prometheus::Counter* {
    return &BuildCounter().Name(name).Help(help).Register(r).Add({});
  };
  auto histogram = [&](const char* name, const char* help,
                       const Buckets& buckets) -> prometheus::Histogram* {
    return &BuildHistogram().Name(name).Help(help).Register(r).Add({}, buckets);
  };

  running_ = gauge("stepserve_requests_running", "Requests scheduled in the running batch.");
  waiting_ =
      gauge("stepserve_requests_waiting", "Requests admitted but waiting for the scheduler.");
  waiting_prompt_tokens_ =
      gauge("stepserve_waiting_prompt_tokens", "Prompt tokens not yet prefilled.");

  auto& kv_usage = BuildGauge()
                       .Name("stepserve_kv_cache_usage_ratio")
                       .Help("Fraction of KV blocks in use, by layer kind.")
                       .Register(r);
  kv_usage_full_ = &kv_usage.Add({{"layer_kind", "full"}});
  kv_usage_sliding_ = &kv_usage.Add({{"layer_kind", "sliding"}});
  auto& kv_blocks = BuildGauge()
                        .Name("stepserve_kv_cache_capacity_blocks")
                        .Help("KV blocks allocated at start-up.")
                        .Register(r);
  kv_blocks_full_ = &kv_blocks.Add({{"layer_kind", "full"}});
  kv_blocks_sliding_ = &kv_blocks.Add({{"layer_kind", "sliding"}});
  auto& kv_tokens = BuildGauge()
                        .Name("stepserve_kv_cache_capacity_tokens")
                        .Help("KV capacity in tokens (blocks times block size).")
                        .Register(r);
  kv_tokens_full_ = &kv_tokens.Add({{"layer_kind", "full"}});
  kv_tokens_sliding_ = &kv_tokens.Add({{"layer_kind", "sliding"}});
  auto& kv_bytes = BuildGauge()
                       .Name("stepserve_kv_cache_capacity_bytes")
                       .Help("Memory reserved for the KV cache.")
                       .Register(r);
  kv_bytes_full_ = &kv_bytes.Add({{"layer_kind", "full"}});
  kv_bytes_sliding_ = &kv_bytes.Add({{"layer_kind", "sliding"}});

  ready_ = gauge("stepserve_ready", "1 while the readiness health service is SERVING.");
  draining_ = gauge("stepserve_draining", "1 after SIGTERM while in-flight requests drain.");
  load_seconds_ = gauge("stepserve_model_load_duration_seconds",
                        "Start to weights loaded and warm-up step passed.");

  ttft_ = histogram("stepserve_time_to_first_token_seconds",
                    "Request arrival to first generated token.", TtftBuckets());
  itl_ = histogram("stepserve_inter_token_latency_seconds",
                   "Gap between consecutive generated tokens of a request.", TokenLatencyBuckets());
  tpot_ = histogram("stepserve_time_per_output_token_seconds",
                    "Decode time divided by (generated tokens minus 1).", TokenLatencyBuckets());
  e2e_ = histogram("stepserve_e2e_request_latency_seconds", "Request arrival to final response.",
                   RequestTimeBuckets());
  queue_ = histogram("stepserve_request_queue_time_seconds", "Arrival to first scheduling.",
                     RequestTimeBuckets());
  prefill_ = histogram("stepserve_request_prefill_time_seconds",
                       "First scheduling to end of prompt prefill.", RequestTimeBuckets());
  decode_ = histogram("stepserve_request_decode_time_seconds",
                      "First generated token to last generated token.", RequestTimeBuckets());
  prompt_len_ = histogram("stepserve_request_prompt_tokens", "Prompt length per request.",
                          TokenCountBuckets());
  gen_len_ = histogram("stepserve_request_generation_tokens",
                       "Generated tokens per finished request.", TokenCountBuckets());
  step_tokens_ =
      histogram("stepserve_step_tokens", "Tokens processed per engine step.", TokenCountBuckets());
  auto& step_duration = BuildHistogram()
                            .Name("stepserve_step_duration_seconds")
                            .Help("Wall time of one engine step, by the step's mix.")
                            .Register(r);
  step_prefill_ = &step_duration.Add({{"phase", "prefill"}}, StepDurationBuckets());
  step_decode_ = &step_duration.Add({{"phase", "decode"}}, StepDurationBuckets());
  step_verify_ = &step_duration.Add({{"phase", "verify"}}, StepDurationBuckets());
  step_mixed_ = &step_duration.Add({{"phase", "mixed"}}, StepDurationBuckets());

  prompt_tokens_ = counter("stepserve_prompt_tokens_total", "Prompt tokens processed.");
  generation_tokens_ =
      counter("stepserve_generation_tokens_total", "Tokens generated and sent to clients.");
  prefix_queries_ = counter("stepserve_prefix_cache_queries_total",
                            "Prompt tokens looked up in the prefix cache.");
  prefix_hits_ =
      counter("stepserve_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.");
  auto& finished = BuildCounter()
                       .Name("stepserve_requests_finished_total")
                       .Help("Requests that finished, by finish reason.")
                       .Register(r);
  finished_stop_ = &finished.Add({{"reason", "stop"}});
  finished_length_ = &finished.Add({{"reason", "length"}});
  finished_abort_ = &finished.Add({{"reason", "abort"}});
  finished_error_ = &finished.Add({{"reason", "error"}});
  auto& rejected = BuildCounter()
                       .Name("stepserve_requests_rejected_total")
                       .Help("Requests refused before admission, by reason.")
                       .Register(r);
  const char* reject_names[] = {"queue_full", "too_long", "invalid", "draining", "unauthenticated"};
  for (int i = 0; i < 5; ++i) rejected_[i] = &rejected.Add({{"reason", reject_names[i]}});
  grpc_requests_ = &BuildCounter()
                        .Name("stepserve_grpc_requests_total")
                        .Help("Completed gRPC calls by short method name and status code.")
                        .Register(r);
  for (const char* method : kRpcNames) grpc_requests_->Add({{"method", method}, {"code", "OK"}});
  preemptions_ =
      counter("stepserve_preemptions_total", "Running requests preempted for lack of KV blocks.");

  spec_drafts_ = counter("stepserve_spec_drafts_total", "Draft proposals made.");
  spec_draft_tokens_ = counter("stepserve_spec_draft_tokens_total", "Draft tokens proposed.");
  spec_accepted_ =
      counter("stepserve_spec_accepted_tokens_total", "Draft tokens accepted by verification.");
  accepted_per_position_ = &BuildCounter()
                                .Name("stepserve_spec_accepted_tokens_per_position_total")
                                .Help("Accepted draft tokens by draft position.")
                                .Register(r);
  for (int p = 0; p < kPreCreatedDraftPositions; ++p) {
    accepted_per_position_->Add({{"position", std::to_string(p)}});
  }
  draft_len_ = histogram("stepserve_spec_draft_length", "Draft length per drafting sequence.",
                         DraftLengthBuckets());
  auto& disabled = BuildCounter()
                       .Name("stepserve_spec_disabled_steps_total")
                       .Help("Steps that ran without speculation although allowed, by reason.")
                       .Register(r);
  for (const char* reason : {"config_off", "no_draft_model", "batch_size", "token_budget",
                             "low_acceptance", "kv_pressure"}) {
    disabled.Add({{"reason", reason}});
  }

  // Single-stage CPU/one-device builds: stage 0 only; the series exist at 0 as the contract asks.
  BuildCounter()
      .Name("stepserve_pipeline_stage_busy_seconds_total")
      .Help("Time each pipeline stage spent computing.")
      .Register(r)
      .Add({{"stage", "0"}});
  BuildCounter()
      .Name("stepserve_pipeline_stage_bubble_seconds_total")
      .Help("Time each pipeline stage spent idle waiting on its neighbours.")
      .Register(r)
      .Add({{"stage", "0"}});
  auto& nccl = BuildCounter()
                   .Name("stepserve_nccl_bytes_total")
                   .Help("Bytes moved over NCCL by each pipeline stage.")
                   .Register(r);
  nccl.Add({{"stage", "0"}, {"direction", "send"}});
  nccl.Add({{"stage", "0"}, {"direction", "recv"}});
  auto& moe = BuildCounter()
                  .Name("stepserve_moe_expert_tokens_total")
                  .Help("Routed token-expert assignments computed on host CPU versus GPU.")
                  .Register(r);
  moe.Add({{"device", "cpu"}});
  moe.Add({{"device", "gpu"}});
  counter("stepserve_moe_cpu_expert_seconds_total", "Wall time computing experts on the host CPU.");

  BuildGauge()
      .Name("stepserve_build_info")
      .Help("Always 1; labels carry the version and git commit.")
      .Register(r)
      .Add({{"version", version}, {"git_sha", git_sha}})
      .Set(1);
  model_info_ = &BuildGauge()
                     .Name("stepserve_model_info")
                     .Help("Always 1; labels carry the model name, architecture and quant.")
                     .Register(r);
  // Until the model loads, the series carries empty labels rather than being absent.
  model_info_series_ = &model_info_->Add({{"model", ""}, {"arch", ""}, {"quant", ""}});
  model_info_series_->Set(1);
}

void Metrics::SetReady(bool ready) { ready_->Set(ready ? 1 : 0); }
void Metrics::SetDraining(bool draining) { draining_->Set(draining ? 1 : 0); }
void Metrics::SetModelLoadSeconds(double seconds) { load_seconds_->Set(seconds); }

void Metrics::SetModelInfo(const std::string& model, const std::string& arch,
                           const std::string& quant) {
  std::lock_guard<std::mutex> lock(model_info_mu_);
  if (model_info_series_ != nullptr) model_info_->Remove(model_info_series_);
  model_info_series_ = &model_info_->Add({{"model", model}, {"arch", arch}, {"quant", quant}});
  model_info_series_->Set(1);
}

void Metrics::SetKvCapacity(int64_t full_blocks, int64_t swa_blocks, int32_t block_size,
                            uint64_t bytes) {
  kv_blocks_full_->Set(static_cast<double>(full_blocks));
  kv_blocks_sliding_->Set(static_cast<double>(swa_blocks));
  kv_tokens_full_->Set(static_cast<double>(full_blocks) * block_size);
  kv_tokens_sliding_->Set(static_cast<double>(swa_blocks) * block_size);
  const double total = static_cast<double>(full_blocks + swa_blocks);
  const double full_share = total > 0 ? static_cast<double>(full_blocks) / total : 1.0;
  kv_bytes_full_->Set(static_cast<double>(bytes) * full_share);
  kv_bytes_sliding_->Set(static_cast<double>(bytes) * (1.0 - full_share));
}

void Metrics::SetLoad(int32_t running, int32_t waiting, int64_t waiting_prompt_tokens) {
  running_->Set(running);
  waiting_->Set(waiting);
  waiting_prompt_tokens_->Set(static_cast<double>(waiting_prompt_tokens));
}

void Metrics::OnRejected(RejectReason reason) { rejected_[static_cast<int>(reason)]->Increment(); }

void Metrics::OnGrpcDone(std::string_view method, std::string_view code) {
  grpc_requests_->Add({{"method", std::string(method)}, {"code", std::string(code)}}).Increment();
}

void Metrics::OnTokensSent(int64_t tokens) {
  generation_tokens_->Increment(static_cast<double>(tokens));
}

void Metrics::OnRequestStarted(const engine::StartedEvent& started) {
  prompt_tokens_->Increment(started.prompt_tokens);
  prefix_queries_->Increment(started.prompt_tokens);
  prefix_hits_->Increment(started.cached_tokens);
  prompt_len_->Observe(started.prompt_tokens);
}

void Metrics::OnInterTokenLatency(double seconds) { itl_->Observe(seconds); }

void Metrics::OnRequestFinished(const engine::RequestFinishedStats& stats) {
  switch (stats.reason) {
    case engine::FinishReason::kStop:
      finished_stop_->Increment();
      break;
    case engine::FinishReason::kLength:
      finished_length_->Increment();
      break;
    case engine::FinishReason::kAbort:
    case engine::FinishReason::kCancelled:
    case engine::FinishReason::kDeadlineExceeded:
      // The contract's reason set is stop|length|abort|error: client-side ends count as abort.
      finished_abort_->Increment();
      break;
    case engine::FinishReason::kError:
      finished_error_->Increment();
      break;
  }
  const engine::Timings& t = stats.timings;
  const int32_t generated = stats.usage.completion_tokens;
  e2e_->Observe(t.e2e_s);
  queue_->Observe(t.queue_s);
  gen_len_->Observe(generated);
  if (generated > 0) {
    ttft_->Observe(t.ttft_s);
    prefill_->Observe(t.prefill_s);
    decode_->Observe(t.decode_s);
  }
  if (generated > 1) tpot_->Observe(t.decode_s / (generated - 1));
  const engine::SpeculationStats& s = stats.speculation;
  spec_drafts_->Increment(s.drafts);
  spec_draft_tokens_->Increment(s.draft_tokens);
  spec_accepted_->Increment(s.accepted_tokens);
  for (size_t p = 0; p < s.accepted_per_position.size(); ++p) {
    if (s.accepted_per_position[p] == 0) continue;
    accepted_per_position_->Add({{"position", std::to_string(p)}})
        .Increment(s.accepted_per_position[p]);
  }
}

void Metrics::OnStep(const engine::StepStats& stats) {
  step_tokens_->Observe(stats.prefill_tokens + stats.decode_tokens);
  prometheus::Histogram* phase = step_mixed_;
  if (stats.decode_tokens == 0) {
    phase = step_prefill_;
  } else if (stats.prefill_tokens == 0) {
    // More decode tokens than sequences: some sequences verified drafts this step.
    phase = stats.decode_tokens > stats.num_seqs ? step_verify_ : step_decode_;
  }
  phase->Observe(stats.total_s);
}

void Metrics::OnPreemption() { preemptions_->Increment(); }

void Metrics::OnKvUsage(const engine::KvUsageStats& usage) {
  auto ratio = [](int32_t used, int32_t capacity) {
    return capacity > 0 ? static_cast<double>(used) / capacity : 0.0;
  };
  kv_usage_full_->Set(ratio(usage.full_used_blocks, usage.full_capacity_blocks));
  kv_usage_sliding_->Set(ratio(usage.swa_used_blocks, usage.swa_capacity_blocks));
}

}  // namespace stepserve::server
