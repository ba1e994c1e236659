// Whole-model speed on one device (JSON lines): decode tokens/s at several batch sizes, prefill
// tokens/s for long prompts, time per layer, load time and peak device memory, each decode figure
// next to its HBM roofline (weight + KV bytes a step must read / measured copy bandwidth).
//
//   bench_model --model m.gguf [--backend cuda]                     # a real or synthetic file
//   bench_model --synthetic step-3.5-flash --layers 45 --recipe iq4_xs   # no file: random weights
//
// --synthetic writes a headers-only GGUF (tensor bytes a sparse hole) to a temp dir and fills
// every weight on the device with random valid blocks of the plan's types (random_weights.h), so
// the full 45-layer model is measured, not extrapolated. Tokens fed while decoding are
// pseudo-random (the speed does not depend on them); sampling is not part of the step time.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/gpu/cuda_bench_util.h"
#ifdef STEPSERVE_HAVE_CUPTI
#include "bench/gpu/kernel_timeline.h"
#endif
#include "bench/gpu/random_weights.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/base/status_macros.h"
#include "engine/model/step35_model.h"
#include "engine/runner/kv_context.h"
#include "engine/synth/make_model.h"
#include "server/args.h"

namespace stepserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Bytes one decode step must read: every trunk weight except the embedding table, with the
// routed experts counted as the expected number of distinct experts B tokens pick under uniform
// routing, E * (1 - (1 - k/E)^B), plus each sequence's KV.
struct StepBytes {
  double dense = 0;                  // attention, shared experts, norms, router, LM head
  double experts_per_layer_all = 0;  // all routed experts, summed over MoE layers
  double Weights(const model::Hparams& h, int64_t batch) const {
    if (h.n_expert == 0) return dense;
    const double k = static_cast<double>(h.n_expert_used), e = static_cast<double>(h.n_expert);
    const double distinct = e * (1.0 - std::pow(1.0 - k / e, static_cast<double>(batch)));
    return dense + experts_per_layer_all * distinct / e;
  }
};

StepBytes CountStepBytes(const model::Step35Model& m) {
  StepBytes s;
  for (const gguf::TensorInfo& t : m.file().tensors()) {
    int layer = -1;
    if (std::sscanf(t.name.c_str(), "blk.%d.", &layer) == 1 && layer >= m.hparams().n_layer) {
      continue;  // MTP layers do not run in a trunk decode step
    }
    if (t.name == "token_embd.weight") continue;
    if (t.name.find("_exps.") != std::string::npos) {
      s.experts_per_layer_all += static_cast<double>(t.nbytes);
    } else {
      s.dense += static_cast<double>(t.nbytes);
    }
  }
  return s;
}

struct Args {
  std::string model, synthetic, recipe, types, backend = "cuda", batches = "1,8,32,64",
                                               prefill = "2048,4096", kv_dtype = "f32";
  int64_t layers = 0, decode_steps = 16, context = 256, repeats = 2, device = 0, seed = 7;
  bool layer_times = true;
  bool fuse_projections = true;
  int64_t logit_top_k = 20;   // what serve's device sampling takes (kMaxLogprobs)
  int64_t graph_profile = 0;  // timed replays per sample of ProfileGraphKernels (0: none)
  int64_t timeline = 0;       // kernel timeline of one more step: 1 per kind, 2 also per kernel
};

std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (absl::SimpleAtoi(part, &v) && v > 0) out.push_back(v);
  }
  return out;
}

// Fills `batch` sequences with `context` tokens (chunks of at most `chunk`), then times
// `steps` decode steps of one token per sequence. Returns seconds per step (best of repeats) and
// the share of that time the host spent blocked on the device (near 1: device-bound; near 0: the
// host's enqueueing is the limit).
struct DecodeTiming {
  double seconds_per_step = 1e300;
  double host_blocked_fraction = 0;
  double replayed_fraction = 0;  // timed steps replayed from a recorded graph
  // --graph-profile: JSON lines of ProfileGraphKernels on one more step, or why there are none.
  std::string graph_profile;
  // --timeline: JSON lines of the kernel timeline of one more step (kernel_timeline.h), or why
  // there are none.
  std::string timeline;
};

// The kernel timeline of one decode step (`step`), after one more recorded but dropped (CUPTI's
// first records and the step's own first replay stay out): KernelTimelineJson's lines.
template <class Step>
std::string TimelineOfStep(Backend& backend, int64_t rows, bool per_kernel, Step&& step) {
#ifdef STEPSERVE_HAVE_CUPTI
  absl::Status s = StartKernelTimeline();
  if (s.ok()) s = step();
  if (s.ok()) s = backend.Synchronize();
  if (s.ok()) s = RestartKernelTimeline();
  if (s.ok()) s = step();
  if (s.ok()) s = backend.Synchronize();
  absl::StatusOr<std::vector<KernelSpan>> spans = StopKernelTimeline();
  if (s.ok() && !spans.ok()) s = spans.status();
  if (!s.ok()) {
    return absl::StrFormat("{\"timeline\":\"error\",\"rows\":%d,\"why\":\"%s\"}\n", rows,
                           absl::CEscape(s.ToString()));
  }
  return KernelTimelineJson(*spans, rows, per_kernel);
#else
  (void)backend, (void)per_kernel, (void)step;
  return absl::StrFormat(
      "{\"timeline\":\"none\",\"rows\":%d,\"why\":\"bench_model was built without CUPTI\"}\n",
      rows);
#endif
}

uint64_t ReplayedSteps(model::Step35Model& m) {
  auto* cuda = dynamic_cast<CudaBackend*>(&m.backend());
  return cuda != nullptr ? cuda->replayed_steps() : 0;
}

double HostBlockedSeconds(model::Step35Model& m) {
  auto* cuda = dynamic_cast<CudaBackend*>(&m.backend());
  return cuda != nullptr ? cuda->host_blocked_seconds() : 0.0;
}

absl::StatusOr<DecodeTiming> TimeDecode(model::Step35Model& m, KvDtype kv_dtype,
                                        int32_t logit_top_k, int64_t batch, int64_t context,
                                        int64_t steps, int64_t repeats, int64_t chunk,
                                        int64_t profile_replays = 0, int64_t timeline = 0) {
  ASSIGN_OR_RETURN(std::unique_ptr<runner::KvContext> kv,
                   runner::KvContext::Create(m.backend(), m.hparams(),
                                             {.max_sequences = static_cast<int32_t>(batch),
                                              .ctx_size = context + steps * repeats + 6,
                                              .max_chunk = static_cast<int32_t>(chunk),
                                              .kv_dtype = kv_dtype}));
  const int64_t vocab = m.n_vocab();
  uint64_t state = 12345;
  auto next_token = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab));
  };
  model::ForwardOutput out;
  std::vector<int32_t> tokens;
  std::vector<model::BatchSequence> seqs;
  // Context: per sequence in chunks (keeps the activation buffers at chunk rows).
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t done = 0; done < context; done += chunk) {
      tokens.resize(static_cast<size_t>(std::min(chunk, context - done)));
      for (int32_t& t : tokens) t = next_token();
      ASSIGN_OR_RETURN(model::BatchSequence seq, kv->Append(static_cast<int>(s), tokens, 0));
      RETURN_IF_ERROR(m.Forward({&seq, 1}, kv->storage(), &out));
    }
  }
  RETURN_IF_ERROR(m.backend().Synchronize());
  std::vector<int32_t> step_tokens(static_cast<size_t>(batch));
  seqs.resize(static_cast<size_t>(batch));
  auto decode_step = [&]() -> absl::Status {
    for (int64_t s = 0; s < batch; ++s) {
      step_tokens[s] = next_token();
      ASSIGN_OR_RETURN(seqs[s], kv->Append(static_cast<int>(s), {&step_tokens[s], 1}, 1));
    }
    // Logits (or with --logit-top-k their top entries) come back: a real step.
    return m.Forward(seqs, kv->storage(), &out, {.logit_top_k = logit_top_k});
  };
  DecodeTiming best;
  for (int64_t r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    const double blocked_before = HostBlockedSeconds(m);
    const uint64_t replayed_before = ReplayedSteps(m);
    for (int64_t step = 0; step < steps; ++step) RETURN_IF_ERROR(decode_step());
    RETURN_IF_ERROR(m.backend().Synchronize());
    const double seconds = Since(start);
    if (seconds / static_cast<double>(steps) < best.seconds_per_step) {
      best.seconds_per_step = seconds / static_cast<double>(steps);
      best.host_blocked_fraction = (HostBlockedSeconds(m) - blocked_before) / seconds;
      best.replayed_fraction =
          static_cast<double>(ReplayedSteps(m) - replayed_before) / static_cast<double>(steps);
    }
  }
  if (auto* cuda = dynamic_cast<CudaBackend*>(&m.backend()); cuda && profile_replays > 0) {
    // Up to two more steps (the KV context has room for them; one that records its graph again
    // is not replayed), the first replayed one running the sweep first.
    cuda->ArmGraphProfile(static_cast<int>(profile_replays));
    std::optional<absl::StatusOr<GraphKernelProfile>> profile;
    for (int tries = 0; tries < 2 && !profile.has_value(); ++tries) {
      RETURN_IF_ERROR(decode_step());
      RETURN_IF_ERROR(m.backend().Synchronize());
      profile = cuda->TakeGraphProfile();
    }
    cuda->ArmGraphProfile(0);
    if (!profile.has_value()) {
      best.graph_profile = absl::StrFormat(
          "{\"graph_profile\":\"none\",\"rows\":%d,\"why\":\"the step was not replayed from a "
          "kept graph\"}\n",
          batch);
    } else if (!profile->ok()) {
      best.graph_profile =
          absl::StrFormat("{\"graph_profile\":\"error\",\"rows\":%d,\"why\":\"%s\"}\n", batch,
                          absl::CEscape(profile->status().ToString()));
    } else {
      best.graph_profile = GraphKernelProfileJson(**profile);
    }
  }
  // Two more steps at most (the context's room: + 6 above).
  if (timeline > 0) best.timeline = TimelineOfStep(m.backend(), batch, timeline > 1, decode_step);
  return best;
}

// One sequence, `prompt` tokens in chunks of `chunk`; seconds (best of repeats).
absl::StatusOr<double> TimePrefill(model::Step35Model& m, KvDtype kv_dtype, int64_t prompt,
                                   int64_t chunk, int64_t repeats) {
  ASSIGN_OR_RETURN(std::unique_ptr<runner::KvContext> kv,
                   runner::KvContext::Create(m.backend(), m.hparams(),
                                             {.max_sequences = 1,
                                              .ctx_size = prompt + 1,
                                              .max_chunk = static_cast<int32_t>(chunk),
                                              .kv_dtype = kv_dtype}));
  std::vector<int32_t> tokens(static_cast<size_t>(prompt));
  for (int64_t i = 0; i < prompt; ++i) tokens[i] = static_cast<int32_t>((i * 7919) % m.n_vocab());
  model::ForwardOutput out;
  double best = 1e300;
  for (int64_t r = 0; r < repeats; ++r) {
    kv->Reset(0);
    RETURN_IF_ERROR(m.backend().Synchronize());
    const auto start = Clock::now();
    for (int64_t done = 0; done < prompt; done += chunk) {
      const int64_t n = std::min(chunk, prompt - done);
      ASSIGN_OR_RETURN(model::BatchSequence seq,
                       kv->Append(0, {tokens.data() + done, static_cast<size_t>(n)},
                                  done + n == prompt ? 1 : 0));
      RETURN_IF_ERROR(m.Forward({&seq, 1}, kv->storage(), &out));
    }
    RETURN_IF_ERROR(m.backend().Synchronize());
    best = std::min(best, Since(start));
  }
  return best;
}

int Main(int argc, char** argv) {
  Args a;
  cli::ArgParser p("bench_model", "whole-model decode / prefill speed on a device (JSON lines)");
  p.AddString("model", &a.model, "step35 GGUF to load");
  p.AddString("synthetic", &a.synthetic,
              "preset (tiny | step-3.5-flash | step-5): random weights on the device, no file");
  p.AddInt("layers", &a.layers, "--synthetic: trunk layers (0 = all of the preset)");
  p.AddString("recipe", &a.recipe, "--synthetic: quantization recipe (default: the preset's)");
  p.AddString("types", &a.types,
              "--synthetic: per-group type overrides after the recipe, group=type comma-separated "
              "(groups as make-model's --type-GROUP: e.g. exp-gate-up=iq3_s,exp-down=iq4_xs)");
  p.AddString("backend", &a.backend, "cpu | cuda");
  p.AddInt("device", &a.device, "device index");
  p.AddString("batches", &a.batches, "decode batch sizes, comma-separated");
  p.AddInt("decode-steps", &a.decode_steps, "timed decode steps per batch size");
  p.AddInt("context", &a.context, "tokens already in each sequence's KV before decoding");
  p.AddString("prefill", &a.prefill, "prompt lengths to time (comma-separated; empty: none)");
  p.AddInt("repeats", &a.repeats, "runs per figure; the fastest is reported");
  p.AddString("kv-dtype", &a.kv_dtype, "f32 | f16 | q8_0: element type of the KV cache");
  p.AddBool("layer-times", &a.layer_times, "time each layer at batch 1 (synchronising)");
  p.AddInt("logit-top-k", &a.logit_top_k,
           "decode steps bring back each row's top K entries instead of its logits (0: logits; "
           "20 is what serve's device sampling takes)");
  p.AddBool("fuse-projections", &a.fuse_projections,
            "place q/k/v/gate and gate/up as fused weights (LoadOptions::fuse_projections; "
            "the CUDA default, =false for the unfused layout)");
  p.AddInt("graph-profile", &a.graph_profile,
           "after each batch's timing, one more decode step whose graph is swept kernel kind by "
           "kernel kind (disabled, replayed, compared with the full step: the kernel's marginal "
           "cost); N timed replays per sample, 0: none (CUDA)");
  p.AddInt("timeline", &a.timeline,
           "after each batch's timing, the device's kernel timeline of one more decode step "
           "(CUPTI: each kernel's span and how much later than the kernels before it it ends): "
           "1 per kernel kind, 2 also every kernel, 0: none (CUDA)");
  int exit_code = 0;
  if (!cli::ParseOrExit(p, argc, argv, &exit_code)) return exit_code;
  if (a.model.empty() == a.synthetic.empty()) {
    std::fprintf(stderr, "give exactly one of --model and --synthetic\n");
    return 2;
  }
  const absl::StatusOr<KvDtype> parsed_kv_dtype = model::KvDtypeFromName(a.kv_dtype);
  if (!parsed_kv_dtype.ok()) {
    std::fprintf(stderr, "--kv-dtype: %s\n",
                 std::string(parsed_kv_dtype.status().message()).c_str());
    return 2;
  }
  const KvDtype kv_dtype = *parsed_kv_dtype;
  std::string temp_dir;
  std::unique_ptr<RandomWeightPlacer> placer;
  if (!a.synthetic.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "bench-model-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    temp_dir = tmpl;
    synth::MakeModelOptions mo{.preset = a.synthetic,
                               .out = temp_dir + "/headers.gguf",
                               .layers = static_cast<int>(a.layers),
                               .seed = static_cast<uint64_t>(a.seed),
                               .recipe = a.recipe,
                               .mtp = synth::MtpLayout::kNone};
    mo.no_data = true;
    const std::vector<std::string> items = absl::StrSplit(a.types, ',', absl::SkipEmpty());
    for (const std::string& item : items) {
      const std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
      if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) {
        std::fprintf(stderr, "--types: \"%s\" is not group=type\n", item.c_str());
        return 1;
      }
      mo.type_overrides.emplace_back(kv[0], kv[1]);
    }
    absl::StatusOr<synth::ResolvedModel> resolved = synth::ResolveModel(mo);
    absl::StatusOr<std::vector<synth::WrittenFile>> made =
        resolved.ok() ? synth::MakeModel(mo, nullptr)
                      : absl::StatusOr<std::vector<synth::WrittenFile>>(resolved.status());
    absl::StatusOr<synth::ModelPlan> plan =
        made.ok()
            ? synth::BuildPlan(resolved->config, resolved->recipe, synth::FilePart::kTrunkOnly)
            : absl::StatusOr<synth::ModelPlan>(made.status());
    if (!plan.ok()) {
      std::fprintf(stderr, "synthetic model: %s\n", plan.status().ToString().c_str());
      return 1;
    }
    placer = std::make_unique<RandomWeightPlacer>(*std::move(plan), a.seed);
    a.model = mo.out;
  }
  int rc = 0;
  {
    double bandwidth = 0;
    if (a.backend == "cuda") {
      cudaStream_t stream;  // graph capture needs a non-default stream
      BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      bandwidth = CopyBandwidth(stream, int64_t{1} << 30, /*use_kernel=*/true);
      cudaStreamDestroy(stream);
    }
    std::printf("{\"bench\":\"hbm_copy\",\"gbps\":%.1f}\n", bandwidth / 1e9);
    model::LoadOptions lo;
    lo.fuse_projections =
        a.fuse_projections ? model::LoadOptions::Fusion::kOn : model::LoadOptions::Fusion::kOff;
    lo.backend = a.backend;
    lo.device = static_cast<int>(a.device);
    lo.load_mtp = false;
    if (placer) {
      lo.placer = [&placer](Backend& backend, const WeightView& host, std::string_view name) {
        return placer->Place(backend, host, name);
      };
    }
    const auto load_start = Clock::now();
    absl::StatusOr<std::unique_ptr<model::Step35Model>> loaded =
        model::Step35Model::Load(a.model, lo);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s: %s\n", a.model.c_str(), loaded.status().ToString().c_str());
      rc = 1;
    } else {
      model::Step35Model& m = **loaded;
      const model::Hparams& h = m.hparams();
      const BackendMemoryInfo mem = m.backend().memory_info();
      std::printf(
          "{\"bench\":\"load\",\"model\":\"%s\",\"source\":\"%s\",\"layers\":%d,\"seconds\":%.1f,"
          "\"weight_bytes\":%llu,\"device_total_bytes\":%llu,\"device_free_bytes\":%llu}\n",
          h.name.c_str(), placer ? "random-on-device" : "file", h.n_layer, Since(load_start),
          static_cast<unsigned long long>(placer ? placer->bytes() : mem.weight_bytes),
          static_cast<unsigned long long>(mem.total_bytes),
          static_cast<unsigned long long>(mem.free_bytes));
      std::fflush(stdout);
      if (auto* cuda = dynamic_cast<CudaBackend*>(&m.backend()); cuda && a.graph_profile > 0) {
        cuda->set_keep_step_graphs(true);
      }
      const StepBytes step_bytes = CountStepBytes(m);
      const int64_t chunk = 512;
      uint64_t min_free = mem.free_bytes;
      for (int64_t batch : ParseList(a.batches)) {
        absl::StatusOr<DecodeTiming> s =
            TimeDecode(m, kv_dtype, static_cast<int32_t>(a.logit_top_k), batch, a.context,
                       a.decode_steps, a.repeats, chunk, a.graph_profile, a.timeline);
        if (!s.ok()) {
          std::fprintf(stderr, "decode batch %ld: %s\n", static_cast<long>(batch),
                       s.status().ToString().c_str());
          rc = 1;
          break;
        }
        min_free = std::min(min_free, m.backend().memory_info().free_bytes);
        const double sec = s->seconds_per_step;
        const double bytes = step_bytes.Weights(h, batch);
        const double roofline = bandwidth > 0 ? batch * bandwidth / bytes : 0;
        std::printf(
            "{\"bench\":\"decode\",\"batch\":%ld,\"context\":%ld,\"ms_per_step\":%.3f,"
            "\"tokens_per_s\":%.1f,\"weight_bytes_per_step\":%.0f,\"roofline_tokens_per_s\":%.1f,"
            "\"fraction_of_roofline\":%.3f,\"host_blocked_fraction\":%.3f,"
            "\"replayed_fraction\":%.2f}\n",
            static_cast<long>(batch), static_cast<long>(a.context), sec * 1e3, batch / sec, bytes,
            roofline, roofline > 0 ? (batch / sec) / roofline : 0.0, s->host_blocked_fraction,
            s->replayed_fraction);
        std::fputs(s->graph_profile.c_str(), stdout);
        std::fputs(s->timeline.c_str(), stdout);
        std::fflush(stdout);
      }
      for (int64_t prompt : ParseList(a.prefill)) {
        if (rc != 0) break;
        absl::StatusOr<double> s =
            TimePrefill(m, kv_dtype, prompt, std::min<int64_t>(prompt, 2048), a.repeats);
        if (!s.ok()) {
          std::fprintf(stderr, "prefill %ld: %s\n", static_cast<long>(prompt),
                       s.status().ToString().c_str());
          rc = 1;
          break;
        }
        min_free = std::min(min_free, m.backend().memory_info().free_bytes);
        std::printf(
            "{\"bench\":\"prefill\",\"prompt_tokens\":%ld,\"seconds\":%.4f,"
            "\"tokens_per_s\":%.1f}\n",
            static_cast<long>(prompt), *s, prompt / *s);
        std::fflush(stdout);
      }
      if (rc == 0 && a.layer_times) {
        std::vector<double> attn(h.n_layer, 1e300), ffn(h.n_layer, 1e300);
        m.set_layer_timer([&](int il, double a_s, double f_s) {
          if (il < h.n_layer) {
            attn[il] = std::min(attn[il], a_s);
            ffn[il] = std::min(ffn[il], f_s);
          }
        });
        absl::StatusOr<DecodeTiming> s = TimeDecode(m, kv_dtype, 0, 1, a.context, 4, 1, chunk);
        m.set_layer_timer({});
        if (s.ok()) {
          for (int il = 0; il < h.n_layer; ++il) {
            std::printf(
                "{\"bench\":\"layer\",\"batch\":1,\"layer\":%d,\"swa\":%s,"
                "\"attention_us\":%.1f,\"ffn_us\":%.1f}\n",
                il, h.layers[il].is_swa ? "true" : "false", attn[il] * 1e6, ffn[il] * 1e6);
          }
        }
      }
      const BackendMemoryInfo end = m.backend().memory_info();
      std::printf(
          "{\"bench\":\"memory\",\"peak_used_bytes\":%llu,\"weight_bytes\":%llu}\n",
          static_cast<unsigned long long>(end.total_bytes - std::min(min_free, end.free_bytes)),
          static_cast<unsigned long long>(placer ? placer->bytes() : end.weight_bytes));
    }
  }
  placer.reset();
  if (!temp_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir, ec);
  }
  return rc;
}

}  // namespace
}  // namespace stepserve::bench

int main(int argc, char** argv) { return stepserve::bench::Main(argc, argv); }
