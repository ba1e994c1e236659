// Single-thread throughput of DequantizeRow per type, plus DotRow and FillRandomBlocks.
// Prints one JSON object per line, e.g.
//   {"bench":"dequant","type":"q4_K","bytes_per_iter":4194304,"gbps_blocks_read":..,
//    "gelems_per_s":..,"threads":1}
// Usage: bench_dequant [--seconds S] [--mb M] [--type NAME]
//   --seconds: minimum timed wall time per measurement (default 0.5)
//   --mb:      approximate size of the block buffer in MiB (default 4)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"

namespace {

using stepserve::GgmlType;
using Clock = std::chrono::steady_clock;

const GgmlType kTypes[] = {
    GgmlType::kF32,   GgmlType::kF16,     GgmlType::kBF16,   GgmlType::kQ8_0,  GgmlType::kQ4_0,
    GgmlType::kQ2_K,  GgmlType::kQ3_K,    GgmlType::kQ4_K,   GgmlType::kQ5_K,  GgmlType::kQ6_K,
    GgmlType::kQ8_K,  GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS,
    GgmlType::kIQ3_S, GgmlType::kIQ4_NL,  GgmlType::kIQ4_XS,
};

// Runs `fn` repeatedly until at least `seconds` have passed; returns (iterations, seconds).
template <typename Fn>
std::pair<int64_t, double> TimeLoop(double seconds, Fn&& fn) {
  fn();  // warm-up (page faults, tables)
  int64_t iters = 0;
  const Clock::time_point start = Clock::now();
  double elapsed = 0.0;
  do {
    fn();
    ++iters;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return {iters, elapsed};
}

volatile float g_sink;  // keeps results observable so the work is not optimised away

}  // namespace

int main(int argc, char** argv) {
  double seconds = 0.5;
  double mb = 4.0;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--seconds" || arg == "--mb" || arg == "--type") && i + 1 < argc) {
      const char* value = argv[++i];
      if (arg == "--seconds") seconds = std::atof(value);
      if (arg == "--mb") mb = std::atof(value);
      if (arg == "--type") only = value;
    } else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--mb M] [--type NAME]\n", argv[0]);
      return 2;
    }
  }
  if (!(seconds > 0.0) || !(mb > 0.0)) {
    std::fprintf(stderr, "--seconds and --mb must be > 0\n");
    return 2;
  }
  for (GgmlType type : kTypes) {
    const stepserve::GgmlTypeInfo& info = stepserve::TypeInfo(type);
    const std::string name(info.name);
    if (!only.empty() && only != name) continue;
    // Whole rows of 4096 elements (a typical hidden size), as many as fit in ~mb MiB.
    const int64_t row = 4096;
    const int64_t row_bytes = stepserve::RowBytes(type, row);
    const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(mb * 1048576.0) / row_bytes);
    const int64_t n = rows * row;
    const int64_t bytes = rows * row_bytes;
    std::vector<uint8_t> blocks(bytes);
    std::vector<float> out(n), x(n, 0.5f);

    const auto fill = TimeLoop(seconds, [&] {
      (void)stepserve::quant::FillRandomBlocks(type, blocks.data(), n / info.block_elems, 1, 0.02f);
    });
    const auto deq = TimeLoop(seconds, [&] {
      (void)stepserve::quant::DequantizeRow(type, blocks.data(), out.data(), n);
      g_sink = out[n / 2];
    });
    const auto dot = TimeLoop(seconds, [&] {
      float s = 0.0f;
      for (int64_t r = 0; r < rows; ++r) {
        s += stepserve::quant::DotRow(type, blocks.data() + r * row_bytes, x.data(), row);
      }
      g_sink = s;
    });
    auto gb = [&](const std::pair<int64_t, double>& t) { return bytes * t.first / t.second / 1e9; };
    auto ge = [&](const std::pair<int64_t, double>& t) { return n * t.first / t.second / 1e9; };
    std::printf(
        "{\"bench\":\"dequant\",\"type\":\"%s\",\"bytes_per_iter\":%lld,\"gbps_blocks_read\":"
        "%.3f,\"gelems_per_s\":%.3f,\"threads\":1}\n",
        name.c_str(), static_cast<long long>(bytes), gb(deq), ge(deq));
    std::printf(
        "{\"bench\":\"dot\",\"type\":\"%s\",\"bytes_per_iter\":%lld,\"gbps_blocks_read\":%.3f,"
        "\"gelems_per_s\":%.3f,\"row\":%lld,\"threads\":1}\n",
        name.c_str(), static_cast<long long>(bytes), gb(dot), ge(dot), static_cast<long long>(row));
    std::printf(
        "{\"bench\":\"fill_random\",\"type\":\"%s\",\"bytes_per_iter\":%lld,"
        "\"gbps_blocks_written\":%.3f,\"threads\":1}\n",
        name.c_str(), static_cast<long long>(bytes), gb(fill));
    std::fflush(stdout);
  }
  return 0;
}
