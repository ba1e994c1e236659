// load_gen: drives a running `stepserve serve` with GenerateStream calls and prints one JSON line:
// TTFT / inter-token / end-to-end latency percentiles, output tokens per second, errors by code.
//   closed loop: --concurrency N (N clients, each sends its next request when the last ends)
//   open loop:   --rate R (Poisson arrivals, R requests/s, no limit on requests in flight)
// Prompts are random token ids with lengths uniform in [--prompt-min, --prompt-max]; output
// lengths uniform in [--output-min, --output-max] (ignore_eos, so every request runs to length).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "grpcpp/grpcpp.h"
#include "server/args.h"
#include "stepserve/v1/inference.grpc.pb.h"

namespace {

namespace pb = ::stepserve::v1;
using Clock = std::chrono::steady_clock;

struct Stats {
  std::mutex mu;
  std::vector<double> ttft, itl, e2e;
  int64_t tokens = 0, ok = 0;
  std::map<std::string, int> errors;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

void OneRequest(pb::Inference::Stub* stub, int prompt_len, int output_len, uint64_t seed, int vocab,
                Stats* stats) {
  std::mt19937_64 rng(seed);
  pb::GenerateRequest req;
  for (int i = 0; i < prompt_len; ++i) {
    // Skip the first 258 ids (BOS, padding, raw bytes of the synthetic vocab).
    req.mutable_tokens()->add_ids(258 + static_cast<uint32_t>(rng() % (vocab - 258)));
  }
  req.mutable_stopping()->set_max_tokens(output_len);
  req.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext ctx;
  const auto start = Clock::now();
  auto last = start;
  bool first = true;
  std::vector<double> ttft, itl;
  int64_t tokens = 0;
  auto reader = stub->GenerateStream(&ctx, req);
  pb::GenerateEvent ev;
  while (reader->Read(&ev)) {
    if (!ev.has_delta()) continue;
    const auto now = Clock::now();
    const int64_t n = ev.delta().completion_tokens() - tokens;
    if (first) {
      ttft.push_back(Seconds(now - start));
      first = false;
    } else if (n > 0) {
      // A coalesced delta of n tokens counts as n gaps of equal size.
      for (int64_t i = 0; i < n; ++i) itl.push_back(Seconds(now - last) / n);
    }
    tokens = ev.delta().completion_tokens();
    last = now;
  }
  grpc::Status st = reader->Finish();
  std::lock_guard<std::mutex> lock(stats->mu);
  if (!st.ok()) {
    ++stats->errors[absl::StrFormat("%d", static_cast<int>(st.error_code()))];
    return;
  }
  ++stats->ok;
  stats->tokens += tokens;
  stats->ttft.insert(stats->ttft.end(), ttft.begin(), ttft.end());
  stats->itl.insert(stats->itl.end(), itl.begin(), itl.end());
  stats->e2e.push_back(Seconds(Clock::now() - start));
}

}  // namespace

int main(int argc, char** argv) {
  std::string target = "127.0.0.1:50051";
  int64_t concurrency = 8, requests = 64, prompt_min = 16, prompt_max = 64, output_min = 16,
          output_max = 64, seed = 1;
  double rate = 0;
  stepserve::cli::ArgParser p("load_gen", "gRPC load generator for stepserve serve (JSON line).");
  p.AddString("target", &target, "server HOST:PORT");
  p.AddInt("concurrency", &concurrency, "closed loop: clients in flight");
  p.AddDouble("rate", &rate, "open loop: Poisson arrival rate in requests/s (0: closed loop)");
  p.AddInt("requests", &requests, "total requests");
  p.AddInt("prompt-min", &prompt_min, "minimum prompt tokens");
  p.AddInt("prompt-max", &prompt_max, "maximum prompt tokens");
  p.AddInt("output-min", &output_min, "minimum output tokens");
  p.AddInt("output-max", &output_max, "maximum output tokens");
  p.AddInt("seed", &seed, "random seed");
  int exit_code = 0;
  if (!stepserve::cli::ParseOrExit(p, argc, argv, &exit_code)) return exit_code;
  if (prompt_min < 1 || prompt_max < prompt_min || output_min < 1 || output_max < output_min ||
      concurrency < 1 || requests < 1 || rate < 0) {
    std::fprintf(stderr, "load_gen: bad length, concurrency, request or rate bounds\n");
    return 2;
  }
  auto stub =
      pb::Inference::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  pb::ModelInfo info;
  {
    grpc::ClientContext ctx;
    grpc::Status st = stub->GetModelInfo(&ctx, pb::GetModelInfoRequest(), &info);
    if (!st.ok()) {
      std::fprintf(stderr, "load_gen: GetModelInfo: %s\n", st.error_message().c_str());
      return 1;
    }
  }
  const int vocab = static_cast<int>(info.vocab_size());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> prompt_dist(prompt_min, prompt_max);
  std::uniform_int_distribution<int> output_dist(output_min, output_max);
  struct Job {
    int prompt, output;
    uint64_t seed;
  };
  std::vector<Job> jobs;
  for (int64_t i = 0; i < requests; ++i)
    jobs.push_back({prompt_dist(rng), output_dist(rng), rng()});

  Stats stats;
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  if (rate > 0) {
    std::exponential_distribution<double> gap(rate);
    auto when = start;
    for (const Job& job : jobs) {
      when += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
      std::this_thread::sleep_until(when);
      threads.emplace_back(OneRequest, stub.get(), job.prompt, job.output, job.seed, vocab, &stats);
    }
  } else {
    std::atomic<size_t> next{0};
    for (int64_t c = 0; c < concurrency; ++c) {
      threads.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
          OneRequest(stub.get(), jobs[i].prompt, jobs[i].output, jobs[i].seed, vocab, &stats);
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  const double wall = Seconds(Clock::now() - start);
  std::string errors;
  for (const auto& [code, n] : stats.errors) {
    errors += absl::StrFormat("%s\"%s\":%d", errors.empty() ? "" : ",", code, n);
  }
  std::printf(
      "{\"bench\":\"grpc_load\",\"mode\":\"%s\",\"concurrency\":%d,\"rate\":%g,\"requests\":%d,"
      "\"ok\":%d,\"errors\":{%s},\"wall_s\":%.3f,\"output_tokens_per_s\":%.2f,"
      "\"requests_per_s\":%.3f,\"ttft_p50_s\":%.4f,\"ttft_p99_s\":%.4f,\"itl_p50_s\":%.5f,"
      "\"itl_p99_s\":%.5f,\"e2e_p50_s\":%.4f,\"e2e_p99_s\":%.4f}\n",
      rate > 0 ? "open" : "closed", static_cast<int>(concurrency), rate, static_cast<int>(requests),
      static_cast<int>(stats.ok), errors.c_str(), wall, stats.tokens / wall, stats.ok / wall,
      Percentile(stats.ttft, 0.5), Percentile(stats.ttft, 0.99), Percentile(stats.itl, 0.5),
      Percentile(stats.itl, 0.99), Percentile(stats.e2e, 0.5), Percentile(stats.e2e, 0.99));
  return stats.errors.empty() ? 0 : 1;
}
