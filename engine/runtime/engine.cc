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
#include "engine/runtime/engine_impl.h"
#include "engine/runtime/kv_sizing.h"
#include "engine/runtime/request_state.h"
#include "engine/scheduler/scheduler.h"
#include "engine/tokenizer/tokenizer.h"

namespace stepserve::engine {
namespace {

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
                          .end_layer = hp.n_layer,
                          .kv_dtype = config.kv_dtype};
  ASSIGN_OR_RETURN(KvSizing sizing, SizeKvCache(hp, sizing_in));
  report("allocating kv cache", 0, sizing.bytes);
  ASSIGN_OR_RETURN(model::KvStorage kv, model::KvStorage::Create(impl->model->backend(), hp,
                                                                 {.dtype = config.kv_dtype,
                                                                  .block_size = config.block_size,
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

}  // namespace stepserve::engine
