#include "engine/runtime/engine.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <span>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "engine/base/absl_compat.h"
#include "engine/base/status_macros.h"
#include "engine/model/kv_storage.h"
#include "engine/model/step35_model.h"
#include "engine/quant/ggml_type.h"
#include "engine/runtime/kv_sizing.h"
#include "engine/runtime/request_state.h"
#include "engine/scheduler/scheduler.h"
#include "engine/tokenizer/tokenizer.h"

namespace stepserve::engine {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The ggml type that holds the most weight bytes: what "the quantization" of a mixed file means.
std::string DominantType(const gguf::GgufFile& file) {
  std::map<std::string, uint64_t> bytes;
  for (const gguf::TensorInfo& tensor : file.tensors()) {
    bytes[std::string(GgmlTypeName(tensor.type))] += tensor.nbytes;
  }
  std::string best;
  uint64_t most = 0;
  for (const auto& [name, n] : bytes) {
    if (n > most) best = name, most = n;
  }
  return best;
}

}  // namespace

struct Engine::Impl {
  EngineConfig config;
  int64_t steps_run = 0;  // engine thread only; published in LoadReport::steps
  std::shared_ptr<EngineObserver> observer;  // may be null
  std::unique_ptr<model::Step35Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<model::KvStorage> kv;
  scheduler::SchedulerConfig sched_config;
  std::unique_ptr<scheduler::Scheduler> scheduler;
  ModelInfo info;
  Clock::time_point epoch = Clock::now();

  // Engine-thread state.
  absl::flat_hash_map<scheduler::SeqId, std::unique_ptr<RequestState>> live;
  model::ForwardOutput forward_out;
  // Prompt tokens of started requests, and those of them the prefix cache held.
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;

  // Shared state, guarded by mu.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<RequestState>> inbox;
  std::vector<scheduler::SeqId> cancels;
  absl::flat_hash_map<std::string, scheduler::SeqId> live_ids;  // submitted, not yet finished
  scheduler::SeqId next_seq_id = 1;
  std::mt19937_64 seed_rng{std::random_device{}()};
  bool started = false, draining = false, stopping = false;
  absl::Status health;
  int32_t waiting_published = 0;  // scheduler's waiting count after the last inbox drain / step
  LoadReport load;
  KvBlocks blocks;
  std::thread thread;

  double Now() const { return Seconds(Clock::now() - epoch); }
  absl::Status Validate(GenerationRequest& request, int64_t* max_new_tokens) const;
  absl::Status WarmUp();
  void Loop();
  // Adds the inbox to the scheduler; returns the cancels and whether to stop. Holds mu.
  void DrainInbox(std::vector<scheduler::SeqId>* cancels_out, bool* stop_out);
  void RunStep();
  void HandleEvents(const std::vector<scheduler::Event>& events);
  // Sends the remaining text, Finished, and forgets the request.
  void Finish(scheduler::SeqId id, FinishReason reason, absl::Status error);
  void Publish();
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { Stop(); }

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const EngineConfig& config,
    std::function<void(std::string_view phase, uint64_t done, uint64_t total)> progress) {
  auto report = [&](std::string_view phase, uint64_t done, uint64_t total) {
    if (progress) progress(phase, done, total);
  };
  if (config.max_running <= 0 || config.max_step_tokens <= 0 || config.max_queue < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_running (%d) and max_step_tokens (%d) must be positive, max_queue (%d) >= 0",
        config.max_running, config.max_step_tokens, config.max_queue));
  }
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->observer = config.observer;

  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(config.model_path, ec);
  report("loading model", 0, ec ? 0 : file_bytes);
  model::LoadOptions load_options;
  load_options.backend = config.backend;
  load_options.num_threads = config.threads;
  load_options.device = config.device;
  load_options.load_mtp = false;  // no speculation yet: the MTP heads would only take memory
  load_options.progress = [&](uint64_t done, uint64_t total, std::string_view) {
    report("loading model", done, total);
  };
  ASSIGN_OR_RETURN(impl->model, model::Step35Model::Load(config.model_path, load_options));
  const model::Hparams& hp = impl->model->hparams();

  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
      tokenizer::Tokenizer::FromMetadata(impl->model->file().metadata());
  if (!tok.ok()) {
    return absl::Status(tok.status().code(), absl::StrFormat("%s: tokenizer: %s", config.model_path,
                                                             tok.status().message()));
  }
  impl->tokenizer = *std::move(tok);

  int64_t ctx = config.ctx_size;
  if (ctx < 0 || ctx > hp.n_ctx_train) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ctx_size %d is outside [0, %d] (the model's training context)", ctx, hp.n_ctx_train));
  }
  if (ctx == 0) ctx = std::min<int64_t>(hp.n_ctx_train, 8192);

  double kv_cache_gib = config.kv_cache_gib;
  Backend& backend = impl->model->backend();
  if (kv_cache_gib == 0 && config.kv_cache_blocks == 0 && !backend.host_visible()) {
    // Auto on a device: what --gpu-memory-fraction leaves after the weights (already placed)
    // and a reserve for activations and library workspaces.
    constexpr double kGib = double(uint64_t{1} << 30);
    constexpr double kActivationReserveBytes = 2.0 * kGib;
    const BackendMemoryInfo mem = backend.memory_info();
    const double allowed = config.gpu_memory_fraction * static_cast<double>(mem.total_bytes);
    const double used = static_cast<double>(mem.total_bytes - mem.free_bytes);
    const double left = allowed - used - kActivationReserveBytes;
    if (!(config.gpu_memory_fraction > 0 && config.gpu_memory_fraction <= 1) || left <= 0) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "no device memory left for the KV cache: %.2f GiB allowed (gpu_memory_fraction %g of "
          "%.2f GiB), %.2f GiB in use after loading the weights, %.2f GiB reserved for "
          "activations; raise --gpu-memory-fraction or set --kv-cache-gib",
          allowed / kGib, config.gpu_memory_fraction, mem.total_bytes / kGib, used / kGib,
          kActivationReserveBytes / kGib));
    }
    kv_cache_gib = left / kGib;
  }
  KvSizingInput sizing_in{.ctx_size = ctx,
                          .kv_cache_gib = kv_cache_gib,
                          .kv_cache_blocks = config.kv_cache_blocks,
                          .block_size = config.block_size,
                          .max_running = config.max_running,
                          .max_step_tokens = config.max_step_tokens,
                          .rollback_slack = 0,
                          .end_layer = hp.n_layer};
  ASSIGN_OR_RETURN(KvSizing sizing, SizeKvCache(hp, sizing_in));
  report("allocating kv cache", 0, sizing.bytes);
  ASSIGN_OR_RETURN(model::KvStorage kv,
                   model::KvStorage::Create(impl->model->backend(), hp,
                                            {.block_size = config.block_size,
                                                 .full_blocks = sizing.full_blocks,
                                                 .swa_blocks = sizing.swa_blocks,
                                                 .first_layer = 0,
                                                 .end_layer = hp.n_layer}));
  impl->kv = std::make_unique<model::KvStorage>(std::move(kv));
  report("allocating kv cache", sizing.bytes, sizing.bytes);

  bool has_full = false, has_swa = false;
  for (int il = 0; il < hp.n_layer; ++il) (hp.layers[il].is_swa ? has_swa : has_full) = true;
  scheduler::SchedulerConfig& sc = impl->sched_config;
  sc.max_running = config.max_running;
  sc.max_step_tokens = config.max_step_tokens;
  // Submit bounds the queue of new requests; the scheduler's own queue also holds preempted
  // sequences, which must never be refused.
  sc.max_queue = config.max_queue + config.max_running;
  sc.max_context = ctx;
  sc.kv = {.block_size = config.block_size,
           .sliding_window = has_swa ? hp.sliding_window : 0,
           .rollback_slack = 0,
           .has_full_layers = has_full,
           .prefix_cache = config.prefix_cache};
  sc.full_blocks = sizing.full_blocks;
  sc.swa_blocks = sizing.swa_blocks;
  impl->scheduler = std::make_unique<scheduler::Scheduler>(sc);

  ModelInfo& info = impl->info;
  info.name = hp.name;
  info.architecture = hp.architecture;
  info.quantization = DominantType(impl->model->file());
  info.max_context = ctx;
  info.vocab_size = impl->model->n_vocab();
  info.eos_token_ids = impl->tokenizer->end_of_generation_ids();
  info.mtp_heads = hp.n_nextn;
  info.kv_full_blocks = sizing.full_blocks;
  info.kv_swa_blocks = sizing.swa_blocks;
  info.block_size = config.block_size;
  info.kv_bytes = sizing.bytes;
  impl->Publish();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

absl::Status Engine::Impl::WarmUp() {
  // One token at position 0 in block 0 of each pool: this touches every weight and kernel once.
  // The page's contents are garbage afterwards, which is harmless: a sequence only ever reads
  // positions it has written itself, or that the prefix cache published after a sequence with
  // the same tokens wrote them (never this page: it is not published).
  const int32_t token = std::max(tokenizer->bos_id(), 0);
  const int32_t page = 0;
  model::BatchSequence seq;
  seq.tokens = {&token, 1};
  seq.start_pos = 0;
  if (sched_config.full_blocks > 0) seq.full_table = {&page, 1};
  if (sched_config.swa_blocks > 0) seq.swa_table = {&page, 1};
  seq.logit_rows = 1;
  RETURN_IF_ERROR(model->Forward({&seq, 1}, *kv, &forward_out));
  SamplingParams params;
  params.temperature = 0;
  ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(params, static_cast<int>(model->n_vocab())));
  ASSIGN_OR_RETURN(SampleResult sample, sampler.Sample(forward_out.logits));
  (void)sample;
  return absl::OkStatus();
}

absl::Status Engine::Start() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->started || impl_->stopping) {
      return absl::FailedPreconditionError("the engine was already started");
    }
  }
  if (absl::Status warm = impl_->WarmUp(); !warm.ok()) {
    return absl::Status(warm.code(), absl::StrFormat("warm-up step failed: %s", warm.message()));
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->started = true;
  impl_->thread = std::thread([impl = impl_.get()] { impl->Loop(); });
  return absl::OkStatus();
}

absl::Status Engine::Impl::Validate(GenerationRequest& request, int64_t* max_new_tokens) const {
  const int64_t vocab = model->n_vocab();
  const int64_t ctx = sched_config.max_context;
  if (request.request_id.empty()) return absl::InvalidArgumentError("request_id is empty");
  if (request.prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("prompt token %d (at index %d) is outside the vocabulary [0, %d)",
                          request.prompt[i], i, vocab));
    }
  }
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len >= ctx) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prompt has %d tokens; the context holds %d (prompt plus at least one new token)",
        prompt_len, ctx));
  }
  if (request.max_new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_new_tokens must be >= 0, got %d", request.max_new_tokens));
  }
  if (request.top_logprobs < 0 || request.top_logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(absl::StrFormat("top_logprobs must be in [0, %d], got %d",
                                                      kMaxLogprobs, request.top_logprobs));
  }
  for (size_t i = 0; i < request.stop.size(); ++i) {
    if (request.stop[i].empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("stop[%d] is an empty string", i));
    }
  }
  for (size_t i = 0; i < request.stop_token_ids.size(); ++i) {
    const int32_t id = request.stop_token_ids[i];
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "stop_token_ids[%d] = %d is outside the vocabulary [0, %d)", i, id, vocab));
    }
  }
  if (request.max_draft_tokens < -1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_draft_tokens must be >= -1, got %d", request.max_draft_tokens));
  }
  // Tokens the KV cache can ever hold for one sequence.
  const int64_t capacity =
      sched_config.kv.has_full_layers
          ? static_cast<int64_t>(sched_config.full_blocks) * sched_config.kv.block_size
          : ctx;
  if (prompt_len + 1 > capacity) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "prompt has %d tokens; the KV cache holds %d tokens", prompt_len, capacity));
  }
  const int64_t room = std::min(ctx, capacity) - prompt_len;
  if (request.max_new_tokens == 0) {
    *max_new_tokens = room;  // "up to the context", as far as the cache allows
  } else if (prompt_len + request.max_new_tokens > capacity &&
             prompt_len + request.max_new_tokens <= ctx) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "prompt (%d tokens) plus max_new_tokens (%d) needs %d tokens of KV cache; the cache "
        "holds %d",
        prompt_len, request.max_new_tokens, prompt_len + request.max_new_tokens, capacity));
  } else {
    *max_new_tokens = std::min(request.max_new_tokens, room);
  }
  return absl::OkStatus();
}

absl::Status Engine::Submit(GenerationRequest request, std::shared_ptr<TokenSink> sink) {
  Impl& im = *impl_;
  auto reject = [&](absl::Status status) {
    if (im.observer) im.observer->OnRequestRejected(status.code());
    return status;
  };
  if (sink == nullptr) return reject(absl::InvalidArgumentError("the token sink is null"));
  int64_t max_new_tokens = 0;
  if (absl::Status s = im.Validate(request, &max_new_tokens); !s.ok()) return reject(s);
  uint64_t seed = 0;
  if (request.seed.has_value()) {
    seed = *request.seed;
  } else {
    std::lock_guard<std::mutex> lock(im.mu);
    seed = im.seed_rng();
  }
  request.sampling.seed = seed;
  request.sampling.n_logprobs = request.return_logprobs ? request.top_logprobs : 0;
  request.sampling.ignore_eos = request.ignore_eos;
  // Validates the sampling fields (the error names the field) and feeds the prompt into the
  // penalty window.
  absl::StatusOr<Sampler> sampler =
      Sampler::Create(request.sampling, static_cast<int>(im.model->n_vocab()), request.prompt);
  if (!sampler.ok()) return reject(sampler.status());

  const Clock::time_point now = Clock::now();
  const int32_t prompt_tokens = static_cast<int32_t>(request.prompt.size());
  auto state =
      std::make_unique<RequestState>(std::move(request), std::move(sink), *std::move(sampler),
                                     *im.tokenizer, max_new_tokens, im.sched_config.max_context);
  state->submitted = now;
  {
    std::lock_guard<std::mutex> lock(im.mu);
    if (!im.started || im.stopping) {
      return reject(absl::UnavailableError(im.started ? "the engine is stopped"
                                                      : "the engine is not started"));
    }
    if (im.draining) return reject(absl::UnavailableError("the engine is draining"));
    if (!im.health.ok()) {
      return reject(absl::UnavailableError(
          absl::StrFormat("the engine is unhealthy: %s", im.health.message())));
    }
    if (im.live_ids.contains(state->request.request_id)) {
      return reject(absl::InvalidArgumentError(absl::StrFormat(
          "request_id \"%s\" is already in use by a live request", state->request.request_id)));
    }
    const int64_t queued = static_cast<int64_t>(im.inbox.size()) + im.waiting_published;
    if (queued >= im.config.max_queue) {
      return reject(absl::ResourceExhaustedError(
          absl::StrFormat("the queue is full (%d waiting requests)", im.config.max_queue)));
    }
    state->seq_id = im.next_seq_id++;
    im.live_ids.emplace(state->request.request_id, state->seq_id);
    im.inbox.push_back(std::move(state));
  }
  im.cv.notify_one();
  if (im.observer) im.observer->OnRequestQueued(prompt_tokens);
  return absl::OkStatus();
}

bool Engine::Cancel(std::string_view request_id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->live_ids.find(std::string(request_id));
    if (it == impl_->live_ids.end()) return false;
    impl_->cancels.push_back(it->second);
  }
  impl_->cv.notify_one();
  return true;
}

void Engine::BeginDrain() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->draining = true;
  impl_->load.draining = true;
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_one();
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool Engine::Idle() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->inbox.empty() && impl_->live_ids.empty();
}

bool Engine::Healthy() const { return health().ok(); }

absl::Status Engine::health() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->health;
}

LoadReport Engine::GetLoad() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  LoadReport load = impl_->load;
  load.waiting += static_cast<int32_t>(impl_->inbox.size());
  return load;
}

Engine::KvBlocks Engine::kv_blocks() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->blocks;
}

const ModelInfo& Engine::model_info() const { return impl_->info; }

const tokenizer::Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }

// ---- engine thread ----

void Engine::Impl::Publish() {
  const kv::BlockPool& full = scheduler->full_pool();
  const kv::BlockPool& swa = scheduler->swa_pool();
  std::lock_guard<std::mutex> lock(mu);
  waiting_published = scheduler->num_waiting();
  load.running = scheduler->num_running();
  load.waiting = scheduler->num_waiting();
  load.max_running = config.max_running;
  load.kv_usage =
      full.capacity() > 0
          ? static_cast<double>(full.num_used()) / full.capacity()
          : (swa.capacity() > 0 ? static_cast<double>(swa.num_used()) / swa.capacity() : 0.0);
  load.kv_capacity_tokens = static_cast<int64_t>(full.capacity()) * sched_config.kv.block_size;
  load.waiting_prompt_tokens = scheduler->waiting_prompt_tokens();
  load.prefix_cache_hit_rate =
      prefix_query_tokens > 0 ? static_cast<double>(prefix_hit_tokens) / prefix_query_tokens : 0;
  load.draining = draining;
  load.healthy = health.ok();
  load.steps = steps_run;
  blocks = {.full_free = full.num_free(),
            .full_total = full.capacity(),
            .swa_free = swa.num_free(),
            .swa_total = swa.capacity()};
}

void Engine::Impl::DrainInbox(std::vector<scheduler::SeqId>* cancels_out, bool* stop_out) {
  // Called with mu held: adding under the lock keeps Submit's queue count exact.
  while (!inbox.empty()) {
    std::unique_ptr<RequestState> state = std::move(inbox.front());
    inbox.pop_front();
    scheduler::Request req;
    req.id = state->seq_id;
    req.prompt = std::move(state->request.prompt);
    req.max_new_tokens = state->max_new_tokens;
    req.priority = state->request.priority;
    req.arrival_s = Seconds(state->submitted - epoch);
    if (state->request.deadline.has_value())
      req.deadline_s = Seconds(*state->request.deadline - epoch);
    const scheduler::SeqId id = state->seq_id;
    absl::Status added = scheduler->Add(std::move(req));
    live.emplace(id, std::move(state));
    if (!added.ok()) cancels_out->push_back(id);  // Submit's checks make this unreachable
    if (!added.ok()) live[id]->finish = FinishReason::kError;
  }
  waiting_published = scheduler->num_waiting();
  cancels_out->insert(cancels_out->end(), cancels.begin(), cancels.end());
  cancels.clear();
  *stop_out = stopping;
}

void Engine::Impl::Loop() {
  for (;;) {
    std::vector<scheduler::SeqId> to_cancel;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      const bool has_work = scheduler->num_running() > 0 || scheduler->num_waiting() > 0;
      if (!has_work) {
        cv.wait(lock, [&] { return stopping || !inbox.empty() || !cancels.empty(); });
      }
      DrainInbox(&to_cancel, &stop);
    }
    if (stop) {
      std::vector<scheduler::SeqId> ids;
      for (const auto& [id, state] : live) ids.push_back(id);
      std::sort(ids.begin(), ids.end());
      for (scheduler::SeqId id : ids) {
        scheduler->Cancel(id);
        Finish(id, FinishReason::kAbort, absl::UnavailableError("the engine stopped"));
      }
      Publish();
      return;
    }
    for (scheduler::SeqId id : to_cancel) {
      auto it = live.find(id);
      if (it == live.end()) continue;  // finished meanwhile
      scheduler->Cancel(id);
      if (it->second->finish == FinishReason::kError) {
        Finish(id, FinishReason::kError,
               absl::InternalError("the scheduler refused a request Submit accepted"));
      } else {
        Finish(id, FinishReason::kCancelled, absl::CancelledError("cancelled"));
      }
    }
    if (!to_cancel.empty() && observer) {
      const kv::BlockPool& full = scheduler->full_pool();
      const kv::BlockPool& swa = scheduler->swa_pool();
      observer->OnKvUsage({full.num_used(), full.capacity(), swa.num_used(), swa.capacity(),
                           sched_config.kv.block_size});
    }
    RunStep();
    ++steps_run;
    Publish();
  }
}

void Engine::Impl::HandleEvents(const std::vector<scheduler::Event>& events) {
  for (const scheduler::Event& event : events) {
    switch (event.kind) {
      case scheduler::EventKind::kPreempted:
        if (observer) observer->OnPreemption();
        break;
      case scheduler::EventKind::kDeadlineExceeded: {
        auto it = live.find(event.id);
        if (it == live.end()) break;
        const bool queued = !it->second->first_scheduled.has_value();
        Finish(event.id, FinishReason::kDeadlineExceeded,
               absl::DeadlineExceededError(queued ? "the deadline passed while queued"
                                                  : "the deadline passed while generating"));
        break;
      }
      case scheduler::EventKind::kCancelled:
      case scheduler::EventKind::kFinished:
        break;  // the engine's own doing; handled where it happens
    }
  }
}

void Engine::Impl::RunStep() {
  const Clock::time_point step_start = Clock::now();
  std::vector<scheduler::Event> events;
  const scheduler::StepPlan plan = scheduler->Schedule(Now(), &events);
  HandleEvents(events);
  if (plan.empty()) {
    if (scheduler->num_running() > 0 || scheduler->num_waiting() > 0) {
      // Work that cannot run yet (should not happen: an idle cache admits anything Submit
      // accepted); wait briefly instead of spinning.
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(1));
    }
    return;
  }
  const Clock::time_point scheduled = Clock::now();
  StepStats stats;
  stats.num_seqs = static_cast<int32_t>(plan.seqs.size());
  std::vector<model::BatchSequence> batch;
  batch.reserve(plan.seqs.size());
  for (const scheduler::PlannedSeq& p : plan.seqs) {
    RequestState& state = *live.at(p.id);
    if (!state.first_scheduled.has_value()) {
      state.first_scheduled = scheduled;
      // The first scheduled step is the admission step, which reports the prefix-cache hit.
      state.cached_tokens = static_cast<int32_t>(
          std::min<int64_t>(p.cached_tokens, state.prompt_tokens));
      prefix_query_tokens += state.prompt_tokens;
      prefix_hit_tokens += state.cached_tokens;
      StartedEvent started{.prompt_tokens = state.prompt_tokens,
                           .cached_tokens = state.cached_tokens,
                           .queue_seconds = Seconds(scheduled - state.submitted)};
      state.sink->OnStarted(started);
      if (observer) observer->OnRequestStarted(started);
    }
    model::BatchSequence seq;
    seq.tokens = p.tokens;
    seq.start_pos = p.start_pos;
    if (p.full_table != nullptr) seq.full_table = *p.full_table;
    if (p.swa_table != nullptr) seq.swa_table = *p.swa_table;
    seq.logit_rows = p.sample ? 1 + p.num_drafts : 0;
    batch.push_back(seq);
    // A decode step's single token was sampled last step; everything else is (re)computed.
    const bool decode = p.sample && p.tokens.size() == 1 + static_cast<size_t>(p.num_drafts) &&
                        state.completion_tokens > 0 &&
                        p.start_pos == state.prompt_tokens + state.completion_tokens - 1;
    (decode ? stats.decode_tokens : stats.prefill_tokens) += static_cast<int32_t>(p.tokens.size());
  }
  const absl::Status forward = model->Forward(batch, *kv, &forward_out);
  const Clock::time_point forwarded = Clock::now();
  if (!forward.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      health = forward;
    }
    if (observer) observer->OnUnhealthy(forward);
    for (const scheduler::PlannedSeq& p : plan.seqs) {
      scheduler->Cancel(p.id);
      Finish(p.id, FinishReason::kError,
             absl::InternalError(absl::StrFormat("model forward failed: %s", forward.message())));
    }
    return;
  }

  const int64_t vocab = model->n_vocab();
  std::vector<scheduler::SeqResult> results;
  std::vector<scheduler::SeqId> sampled;
  std::vector<scheduler::SeqId> failed;
  int64_t row = 0;
  for (const scheduler::PlannedSeq& p : plan.seqs) {
    if (!p.sample) continue;
    RequestState& state = *live.at(p.id);
    std::span<const float> logits(forward_out.logits.data() + row * vocab, vocab);
    row += 1 + p.num_drafts;
    absl::StatusOr<SampleResult> sample = state.sampler.Sample(logits);
    if (!sample.ok()) {
      scheduler->Cancel(p.id);  // before Commit, which needs a token from every sampling row
      failed.push_back(p.id);
      Finish(p.id, FinishReason::kError, sample.status());
      continue;
    }
    state.AppendToken(*sample);
    if (!state.first_token.has_value()) state.first_token = forwarded;
    if (state.last_token.has_value() && observer) {
      observer->OnInterTokenLatency(Seconds(forwarded - *state.last_token));
    }
    state.last_token = forwarded;
    results.push_back(
        {.id = p.id, .new_tokens = {sample->token}, .finished = state.finish.has_value()});
    sampled.push_back(p.id);
  }
  stats.sampled_seqs = static_cast<int32_t>(sampled.size());
  events.clear();
  scheduler->Commit(plan, results, &events);
  for (const scheduler::Event& event : events) {
    if (event.kind != scheduler::EventKind::kFinished) continue;
    RequestState& state = *live.at(event.id);
    if (!state.finish.has_value()) {
      // The scheduler ends a sequence at its token limit or the context; AppendToken checks the
      // same limits, so this only guards against a mismatch.
      state.finish = FinishReason::kLength;
      state.FlushText();
    }
  }
  for (scheduler::SeqId id : sampled) {
    RequestState& state = *live.at(id);
    if (std::optional<DeltaEvent> delta = state.TakeDelta()) state.sink->OnDelta(*delta);
    if (state.finish.has_value()) Finish(id, *state.finish, absl::OkStatus());
  }
  const Clock::time_point done = Clock::now();
  stats.schedule_s = Seconds(scheduled - step_start);
  stats.forward_s = Seconds(forwarded - scheduled);
  stats.sample_s = Seconds(done - forwarded);
  stats.total_s = Seconds(done - step_start);
  if (observer) {
    observer->OnStep(stats);
    const kv::BlockPool& full = scheduler->full_pool();
    const kv::BlockPool& swa = scheduler->swa_pool();
    observer->OnKvUsage({full.num_used(), full.capacity(), swa.num_used(), swa.capacity(),
                         sched_config.kv.block_size});
  }
}

void Engine::Impl::Finish(scheduler::SeqId id, FinishReason reason, absl::Status error) {
  auto it = live.find(id);
  if (it == live.end()) return;
  std::unique_ptr<RequestState> state = std::move(it->second);
  live.erase(it);
  if (!state->finish.has_value() || reason != *state->finish) {
    state->finish = reason;
    // Ended from outside (deadline, abort, error): release the text held so far. A cancelled
    // request's client is gone, so it gets no more text.
    if (reason != FinishReason::kCancelled) state->FlushText();
    state->finish = reason;
  }
  if (std::optional<DeltaEvent> delta = state->TakeDelta();
      delta.has_value() && reason != FinishReason::kCancelled) {
    state->sink->OnDelta(*delta);
  }
  const FinishedEvent finished = state->MakeFinished(Clock::now(), std::move(error));
  {
    // The id stops being live before the sink hears of the end, so a client that saw Finished
    // can reuse it and Cancel() reports it unknown. The blocks are already back in the pools;
    // publishing them here means whoever sees Idle() also sees them freed.
    const kv::BlockPool& full = scheduler->full_pool();
    const kv::BlockPool& swa = scheduler->swa_pool();
    std::lock_guard<std::mutex> lock(mu);
    live_ids.erase(state->request.request_id);
    blocks = {.full_free = full.num_free(),
              .full_total = full.capacity(),
              .swa_free = swa.num_free(),
              .swa_total = swa.capacity()};
  }
  if (observer) {
    observer->OnRequestFinished({.reason = finished.reason,
                                 .usage = finished.usage,
                                 .timings = finished.timings,
                                 .speculation = finished.speculation});
  }
  state->sink->OnFinished(finished);
}

}  // namespace stepserve::engine
