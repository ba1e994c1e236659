// Every Prometheus metric `stepserve serve` exports (docs/metrics.md is the contract: names, types,
// labels, buckets). This is the ONE place metrics are declared. It implements the engine's observer
// interface (engine/runtime/engine_observer.h) and the server-side hooks (gRPC calls, rejections,
// readiness), and serves GET /metrics through prometheus-cpp's Exposer.
#ifndef STEPSERVE_SERVER_METRICS_H_
#define STEPSERVE_SERVER_METRICS_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/engine_observer.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace stepserve::server {

// Label values of stepserve_requests_rejected_total.
enum class RejectReason { kQueueFull, kTooLong, kInvalid, kDraining, kUnauthenticated };

class Metrics : public engine::EngineObserver {
 public:
  // `listen` is HOST:PORT for the HTTP exposer ("" = no endpoint; the registry still works).
  // Port 0 picks a free port (see ports()). `version` / `git_sha` label stepserve_build_info.
  static absl::StatusOr<std::shared_ptr<Metrics>> Create(const std::string& listen,
                                                         const std::string& version,
                                                         const std::string& git_sha);
  ~Metrics() override;

  // Ports the exposer listens on (empty without one).
  std::vector<int> ports() const;
  // Called right before each scrape (e.g. to refresh load gauges from Engine::GetLoad).
  void SetBeforeScrape(std::function<void()> fn);

  // Server-side hooks.
  void SetReady(bool ready);
  void SetDraining(bool draining);
  void SetModelLoadSeconds(double seconds);
  void SetModelInfo(const std::string& model, const std::string& arch, const std::string& quant);
  // KV capacity; bytes are split over the two pools in proportion to their blocks.
  void SetKvCapacity(int64_t full_blocks, int64_t swa_blocks, int32_t block_size, uint64_t bytes);
  void SetLoad(int32_t running, int32_t waiting, int64_t waiting_prompt_tokens);
  void OnRejected(RejectReason reason);
  // `method`: short RPC name ("Generate", "Check"); `code`: gRPC status name ("OK").
  void OnGrpcDone(std::string_view method, std::string_view code);
  void OnTokensSent(int64_t tokens);

  // engine::EngineObserver
  void OnRequestStarted(const engine::StartedEvent& started) override;
  void OnInterTokenLatency(double seconds) override;
  void OnRequestFinished(const engine::RequestFinishedStats& stats) override;
  void OnStep(const engine::StepStats& stats) override;
  void OnPreemption() override;
  void OnKvUsage(const engine::KvUsageStats& usage) override;

 private:
  class ScrapeHook;
  Metrics();
  void Declare(const std::string& version, const std::string& git_sha);

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<ScrapeHook> hook_;
  std::unique_ptr<prometheus::Exposer> exposer_;

  prometheus::Gauge *running_, *waiting_, *waiting_prompt_tokens_;
  prometheus::Gauge *kv_usage_full_, *kv_usage_sliding_;
  prometheus::Gauge *kv_blocks_full_, *kv_blocks_sliding_, *kv_tokens_full_, *kv_tokens_sliding_;
  prometheus::Gauge *kv_bytes_full_, *kv_bytes_sliding_;
  prometheus::Gauge *ready_, *draining_, *load_seconds_;
  prometheus::Histogram *ttft_, *itl_, *tpot_, *e2e_, *queue_, *prefill_, *decode_;
  prometheus::Histogram *prompt_len_, *gen_len_, *step_tokens_, *draft_len_;
  prometheus::Histogram *step_prefill_, *step_decode_, *step_verify_, *step_mixed_;
  prometheus::Counter *prompt_tokens_, *generation_tokens_, *prefix_queries_, *prefix_hits_;
  prometheus::Counter *finished_stop_, *finished_length_, *finished_abort_, *finished_error_;
  prometheus::Counter* rejected_[5];
  prometheus::Counter *preemptions_, *spec_drafts_, *spec_draft_tokens_, *spec_accepted_;
  prometheus::Family<prometheus::Counter>* grpc_requests_;
  prometheus::Family<prometheus::Counter>* accepted_per_position_;
  prometheus::Family<prometheus::Gauge>* model_info_;
  std::mutex model_info_mu_;
  prometheus::Gauge* model_info_series_ = nullptr;
};

}  // namespace stepserve::server

#endif  // STEPSERVE_SERVER_METRICS_H_
