// Scrapes a real prometheus-cpp exposer over HTTP and checks the exposition against the contract
// in docs/metrics.md: every name present with its type, histogram buckets as documented, the text
// format parses line by line, and observer events move the right series.
#include "server/metrics.h"

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>

#include "gtest/gtest.h"
#include "tests/server/http_get.h"

namespace stepserve::server {
namespace {

struct Scrape {
  std::map<std::string, std::string> types;  // # TYPE lines
  std::map<std::string, double> samples;     // "name{labels}" -> value
};

// A strict reader of the text exposition format: comments are HELP/TYPE, every other line is
// `name{labels} value`.
Scrape Parse(const std::string& body) {
  Scrape s;
  std::istringstream in(body);
  std::string line;
  const std::regex sample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([-+0-9.eE]+|[Nn]a[Nn]|\+Inf|-Inf)$)");
  const std::regex type(
      R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  while (std::getline(in, line)) {
    if (line.empty() || line.rfind("# HELP ", 0) == 0) continue;
    std::smatch m;
    if (std::regex_match(line, m, type)) {
      s.types[m[1]] = m[2];
      continue;
    }
    EXPECT_TRUE(std::regex_match(line, m, sample)) << "unparsable line: " << line;
    if (m.size() > 3) s.samples[std::string(m[1]) + std::string(m[2])] = std::stod(m[3]);
  }
  return s;
}

Scrape ScrapeOnce(Metrics& metrics) {
  std::string error;
  std::string body = testing::HttpGet(metrics.ports().at(0), "/metrics", &error);
  EXPECT_EQ(error, "");
  return Parse(body);
}

TEST(MetricsTest, EveryContractMetricIsExportedWithItsType) {
  auto metrics = Metrics::Create("127.0.0.1:0", "1.2.3", "abc123");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_EQ((*metrics)->ports().size(), 1u);
  const auto contract = testing::ContractMetrics();
  ASSERT_GE(contract.size(), 40u) << "docs/metrics.md table not found or truncated";
  Scrape s = ScrapeOnce(**metrics);
  for (const auto& [name, type] : contract) {
    ASSERT_TRUE(s.types.count(name)) << name << " is in docs/metrics.md but not exported";
    EXPECT_EQ(s.types[name], type) << name;
  }
  // prometheus-cpp's Exposer adds its own exposer_* series; every stepserve_ one is in the
  // contract.
  for (const auto& [name, type] : s.types) {
    if (name.rfind("stepserve_", 0) != 0) continue;
    EXPECT_TRUE(contract.count(name)) << name << " is exported but not in docs/metrics.md";
  }
  // Pre-created label values and the documented bucket strings.
  EXPECT_TRUE(s.samples.count("stepserve_time_to_first_token_seconds_bucket{le=\"2.5\"}"));
  EXPECT_TRUE(s.samples.count("stepserve_inter_token_latency_seconds_bucket{le=\"0.001\"}"));
  EXPECT_TRUE(s.samples.count("stepserve_spec_draft_length_bucket{le=\"0\"}"));
  EXPECT_TRUE(
      s.samples.count("stepserve_step_duration_seconds_bucket{phase=\"verify\",le=\"0.0005\"}"));
  EXPECT_EQ(s.samples["stepserve_requests_rejected_total{reason=\"unauthenticated\"}"], 0);
  EXPECT_EQ(s.samples["stepserve_build_info{git_sha=\"abc123\",version=\"1.2.3\"}"], 1);
  EXPECT_EQ(s.samples["stepserve_ready"], 0);
}

TEST(MetricsTest, EventsMoveTheirSeries) {
  auto created = Metrics::Create("127.0.0.1:0", "v", "g");
  ASSERT_TRUE(created.ok());
  Metrics& m = **created;
  m.SetReady(true);
  m.OnRejected(RejectReason::kQueueFull);
  m.OnRejected(RejectReason::kQueueFull);
  m.OnGrpcDone("Generate", "INVALID_ARGUMENT");
  m.SetKvCapacity(100, 50, 16, 3000);
  m.OnKvUsage({25, 100, 10, 50, 16});
  engine::RequestFinishedStats fin;
  fin.reason = engine::FinishReason::kLength;
  fin.usage.completion_tokens = 5;
  fin.timings.ttft_s = 2.0;
  fin.timings.decode_s = 0.4;
  m.OnRequestFinished(fin);
  engine::StepStats step;
  step.num_seqs = 2;
  step.decode_tokens = 2;
  step.total_s = 0.003;
  m.OnStep(step);
  int calls = 0;
  m.SetBeforeScrape([&] {
    ++calls;
    m.SetLoad(3, 7, 99);
  });
  Scrape s = ScrapeOnce(m);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.samples["stepserve_ready"], 1);
  EXPECT_EQ(s.samples["stepserve_requests_waiting"], 7);
  EXPECT_EQ(s.samples["stepserve_waiting_prompt_tokens"], 99);
  EXPECT_EQ(s.samples["stepserve_requests_rejected_total{reason=\"queue_full\"}"], 2);
  EXPECT_EQ(
      s.samples["stepserve_grpc_requests_total{code=\"INVALID_ARGUMENT\",method=\"Generate\"}"], 1);
  EXPECT_EQ(s.samples["stepserve_kv_cache_usage_ratio{layer_kind=\"full\"}"], 0.25);
  EXPECT_EQ(s.samples["stepserve_kv_cache_usage_ratio{layer_kind=\"sliding\"}"], 0.2);
  EXPECT_EQ(s.samples["stepserve_kv_cache_capacity_tokens{layer_kind=\"full\"}"], 1600);
  EXPECT_EQ(s.samples["stepserve_kv_cache_capacity_bytes{layer_kind=\"full\"}"], 2000);
  EXPECT_EQ(s.samples["stepserve_requests_finished_total{reason=\"length\"}"], 1);
  // ttft 2.0 s: in the 2.5 bucket, not in the 1 s bucket.
  EXPECT_EQ(s.samples["stepserve_time_to_first_token_seconds_bucket{le=\"2.5\"}"], 1);
  EXPECT_EQ(s.samples["stepserve_time_to_first_token_seconds_bucket{le=\"1\"}"], 0);
  // 0.4 s over 4 gaps = 0.1 s per output token.
  EXPECT_DOUBLE_EQ(s.samples["stepserve_time_per_output_token_seconds_sum"], 0.1);
  EXPECT_EQ(s.samples["stepserve_step_duration_seconds_count{phase=\"decode\"}"], 1);
}

TEST(MetricsTest, PromtoolAcceptsTheExposition) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "no promtool";
  auto created = Metrics::Create("127.0.0.1:0", "v", "g");
  ASSERT_TRUE(created.ok());
  std::string error;
  const std::string body = testing::HttpGet((*created)->ports().at(0), "/metrics", &error);
  ASSERT_EQ(error, "");
  const std::string path = ::testing::TempDir() + "/metrics.txt";
  std::ofstream(path) << body;
  // promtool lints too (e.g. counters ending in _total); only parse errors fail here.
  const std::string cmd = "promtool check metrics < " + path + " 2>&1 | grep -qi 'error'";
  EXPECT_NE(std::system(cmd.c_str()), 0) << "promtool reported an error";
}

TEST(MetricsTest, BindFailureIsAnError) {
  auto first = Metrics::Create("127.0.0.1:0", "v", "g");
  ASSERT_TRUE(first.ok());
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->ports().at(0));
  auto second = Metrics::Create(taken, "v", "g");
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("--metrics-listen"), std::string::npos);
}

}  // namespace
}  // namespace stepserve::server
