// Per-layer CPU decode time of the step35 forward pass at the step-3.5-flash shapes: batch-1
// decode after a prefilled context, timing each layer's attention and FFN halves (through
// Step35Model::set_layer_timer), with the weight bytes one decode token reads per layer and the
// achieved GB/s. One JSON object per layer, then one for the whole step.
// Usage: bench_cpu_layers [--model F] [--threads N] [--context C] [--steps S]
// Without --model it uses /tmp/stepserve-bench-flash-l4-iq4_xs.gguf, writing it first (a few GB:
// `make-model --preset step-3.5-flash --layers 4 --recipe iq4_xs --mtp none`) when it is absent.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/base/status_macros.h"
#include "engine/model/step35_model.h"
#include "engine/runner/kv_context.h"
#include "engine/synth/make_model.h"
#include "server/args.h"

namespace stepserve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kDefaultModel[] = "/tmp/stepserve-bench-flash-l4-iq4_xs.gguf";

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint64_t Bytes(model::Tensor t) { return t == nullptr ? 0 : t->nbytes; }

// Weight bytes one decode token reads in each half of layer `il`: at batch 1 a MoE layer reads
// only its n_expert_used experts' slices of the expert tensors.
void LayerBytes(const model::Step35Model& m, int il, uint64_t* attn, uint64_t* ffn) {
  const model::LayerWeights& w = m.weights().layers[il];
  *attn = Bytes(w.attn_norm) + Bytes(w.attn_q) + Bytes(w.attn_k) + Bytes(w.attn_v) +
          Bytes(w.attn_q_norm) + Bytes(w.attn_k_norm) + Bytes(w.attn_gate) + Bytes(w.attn_output);
  *ffn = Bytes(w.ffn_norm) + Bytes(w.ffn_gate) + Bytes(w.ffn_up) + Bytes(w.ffn_down) +
         Bytes(w.ffn_gate_inp) + Bytes(w.exp_probs_b) + Bytes(w.ffn_gate_shexp) +
         Bytes(w.ffn_up_shexp) + Bytes(w.ffn_down_shexp);
  if (w.is_moe()) {
    const uint64_t experts = Bytes(w.ffn_gate_exps) + Bytes(w.ffn_up_exps) + Bytes(w.ffn_down_exps);
    *ffn += experts * static_cast<uint64_t>(m.hparams().n_expert_used) /
            static_cast<uint64_t>(m.hparams().n_expert);
  }
}

int Main(int argc, char** argv) {
  std::string model_path;
  int64_t threads = 0, context = 256, steps = 8;
  cli::ArgParser parser("bench_cpu_layers", "per-layer CPU decode time and GB/s (JSON lines)");
  parser.AddString("model", &model_path,
                   std::string("step35 GGUF (default: ") + kDefaultModel + ", made if absent)");
  parser.AddInt("threads", &threads, "CPU threads (0 = all cores)");
  parser.AddInt("context", &context, "prompt positions prefilled before the timed decode steps");
  parser.AddInt("steps", &steps, "timed decode steps (after one untimed warm-up step)");
  int exit_code = 0;
  if (!cli::ParseOrExit(parser, argc, argv, &exit_code)) return exit_code;
  if (context < 1 || steps < 1 || threads < 0) {
    std::fprintf(stderr, "--context and --steps must be >= 1, --threads >= 0\n");
    return 2;
  }
  if (model_path.empty()) {
    model_path = kDefaultModel;
    if (!std::filesystem::exists(model_path)) {
      std::fprintf(stderr, "writing %s (step-3.5-flash, 4 layers, iq4_xs)...\n", kDefaultModel);
      const auto start = Clock::now();
      absl::StatusOr<std::vector<synth::WrittenFile>> made =
          synth::MakeModel({.preset = "step-3.5-flash",
                            .out = model_path + ".partial.gguf",
                            .layers = 4,
                            .seed = 1,
                            .recipe = "iq4_xs",
                            .mtp = synth::MtpLayout::kNone},
                           nullptr);
      if (!made.ok()) {
        std::fprintf(stderr, "make model: %s\n", made.status().ToString().c_str());
        return 1;
      }
      // Renamed only when complete, so an interrupted run is not mistaken for a model later.
      std::filesystem::rename(model_path + ".partial.gguf", model_path);
      std::fprintf(stderr, "written in %.1f s\n", Since(start));
    }
  }
  absl::StatusOr<std::unique_ptr<model::Step35Model>> loaded = model::Step35Model::Load(
      model_path, {.num_threads = static_cast<int>(threads), .load_mtp = false});
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s: %s\n", model_path.c_str(), loaded.status().ToString().c_str());
    return 1;
  }
  model::Step35Model& m = **loaded;
  const model::Hparams& hp = m.hparams();
  absl::StatusOr<std::unique_ptr<runner::KvContext>> kv = runner::KvContext::Create(
      m.backend(), hp, {.max_sequences = 1, .ctx_size = context + steps + 1, .max_chunk = 256});
  if (!kv.ok()) {
    std::fprintf(stderr, "KV: %s\n", kv.status().ToString().c_str());
    return 1;
  }
  std::vector<int32_t> prompt(context);
  for (int64_t i = 0; i < context; ++i)
    prompt[i] = static_cast<int32_t>((i * 7919 + 11) % m.n_vocab());
  model::ForwardOutput out;
  auto forward = [&](std::span<const int32_t> tokens) -> absl::Status {
    ASSIGN_OR_RETURN(model::BatchSequence seq, (*kv)->Append(0, tokens, 1));
    return m.Forward({&seq, 1}, (*kv)->storage(), &out);
  };
  const auto prefill_start = Clock::now();
  for (int64_t begin = 0; begin < context; begin += 256) {
    const int64_t count = std::min<int64_t>(256, context - begin);
    if (absl::Status s = forward(std::span<const int32_t>(prompt).subspan(begin, count)); !s.ok()) {
      std::fprintf(stderr, "prefill: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const double prefill_s = Since(prefill_start);
  std::vector<double> attn_s(hp.n_layer, 0.0), ffn_s(hp.n_layer, 0.0);
  bool timing = false;
  m.set_layer_timer([&](int il, double a, double f) {
    if (timing && il < hp.n_layer) {
      attn_s[il] += a;
      ffn_s[il] += f;
    }
  });
  double step_s = 0;
  for (int64_t step = 0; step <= steps; ++step) {
    timing = step > 0;  // step 0 warms caches and work buffers
    int32_t token = static_cast<int32_t>((step * 31 + 5) % m.n_vocab());
    const auto start = Clock::now();
    if (absl::Status s = forward({&token, 1}); !s.ok()) {
      std::fprintf(stderr, "decode: %s\n", s.ToString().c_str());
      return 1;
    }
    if (timing) step_s += Since(start);
  }
  const int used_threads = threads > 0 ? static_cast<int>(threads)
                                       : static_cast<int>(std::thread::hardware_concurrency());
  uint64_t total_bytes = 0;
  for (int il = 0; il < hp.n_layer; ++il) {
    uint64_t attn_bytes = 0, ffn_bytes = 0;
    LayerBytes(m, il, &attn_bytes, &ffn_bytes);
    total_bytes += attn_bytes + ffn_bytes;
    const double a = attn_s[il] / steps, f = ffn_s[il] / steps;
    const bool moe = m.weights().layers[il].is_moe();
    const bool swa = hp.layers[il].is_swa;
    const int64_t kv_positions =
        swa ? std::min<int64_t>(context + steps, hp.sliding_window) : context + steps;
    std::printf(
        "{\"bench\":\"cpu_layer\",\"layer\":%d,\"ffn\":\"%s\",\"attention\":\"%s\","
        "\"threads\":%d,\"context\":%ld,\"attn_ms\":%.3f,\"ffn_ms\":%.3f,\"layer_ms\":%.3f,"
        "\"attn_weight_mb\":%.2f,\"ffn_weight_mb\":%.2f,\"attn_gbps\":%.2f,\"ffn_gbps\":%.2f,"
        "\"layer_gbps\":%.2f,\"kv_positions\":%ld}\n",
        il, moe ? "moe" : "dense", swa ? "sliding" : "full", used_threads,
        static_cast<long>(context), a * 1e3, f * 1e3, (a + f) * 1e3, attn_bytes / 1e6,
        ffn_bytes / 1e6, attn_bytes / a / 1e9, ffn_bytes / f / 1e9,
        (attn_bytes + ffn_bytes) / (a + f) / 1e9, static_cast<long>(kv_positions));
  }
  const double step = step_s / steps;
  const uint64_t head_bytes = Bytes(m.weights().output) + Bytes(m.weights().output_norm);
  std::printf(
      "{\"bench\":\"cpu_decode_step\",\"model\":\"%s\",\"layers\":%d,\"threads\":%d,"
      "\"context\":%ld,\"prefill_tokens_per_s\":%.2f,\"step_ms\":%.3f,\"tokens_per_s\":%.3f,"
      "\"weight_mb_per_token\":%.1f,\"gbps\":%.2f}\n",
      model_path.c_str(), hp.n_layer, used_threads, static_cast<long>(context),
      static_cast<double>(context) / prefill_s, step * 1e3, 1.0 / step,
      (total_bytes + head_bytes) / 1e6, (total_bytes + head_bytes) / step / 1e9);
  return 0;
}

}  // namespace
}  // namespace stepserve

int main(int argc, char** argv) { return stepserve::Main(argc, argv); }
