// CUPTI activity recording of kernel spans and their summary (kernel_timeline.h).
#include "bench/gpu/kernel_timeline.h"

#include <cupti.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/backend/cuda/graph_kernel_profile.h"

namespace stepserve::bench {
namespace {

// CUPTI hands its buffers back from its own thread: the spans collected so far live here.
std::mutex g_mutex;
std::vector<KernelSpan> g_spans;
bool g_recording = false;

constexpr size_t kBufferBytes = size_t{8} << 20;

absl::Status Check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  return absl::InternalError(
      absl::StrFormat("kernel timeline: %s: %s", what, text != nullptr ? text : "unknown"));
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<KernelSpan> spans;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    // The fields read here sit at the same offsets in every CUpti_ActivityKernel version.
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    KernelSpan s;
    s.name = ShortKernelName(k->name);
    s.start_ns = k->start;
    s.end_ns = k->end;
    s.stream = k->streamId;
    s.grid[0] = k->gridX, s.grid[1] = k->gridY, s.grid[2] = k->gridZ;
    s.block[0] = k->blockX, s.block[1] = k->blockY, s.block[2] = k->blockZ;
    spans.push_back(std::move(s));
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_spans.insert(g_spans.end(), spans.begin(), spans.end());
}

std::string Dims(const int32_t (&d)[3]) { return absl::StrFormat("%d,%d,%d", d[0], d[1], d[2]); }

}  // namespace

absl::Status StartKernelTimeline() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_recording) return absl::FailedPreconditionError("kernel timeline: already recording");
    g_spans.clear();
    g_recording = true;
  }
  absl::Status s = Check(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted),
                         "registering the buffer callbacks");
  if (s.ok()) {
    s = Check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
              "enabling kernel records");
  }
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_recording = false;
  }
  return s;
}

absl::Status RestartKernelTimeline() {
  if (absl::Status s = Check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
      !s.ok()) {
    return s;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_spans.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<KernelSpan>> StopKernelTimeline() {
  absl::Status s = Check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
  const absl::Status d =
      Check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disabling records");
  std::vector<KernelSpan> spans;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    spans.swap(g_spans);
    g_recording = false;
  }
  if (!s.ok()) return s;
  if (!d.ok()) return d;
  std::sort(spans.begin(), spans.end(), [](const KernelSpan& a, const KernelSpan& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
  });
  return spans;
}

std::string KernelTimelineJson(const std::vector<KernelSpan>& spans, int64_t rows,
                               bool per_kernel) {
  if (spans.empty()) {
    return absl::StrFormat(
        "{\"timeline\":\"none\",\"rows\":%d,\"why\":\"no kernel records (CUPTI)\"}\n", rows);
  }
  const uint64_t t0 = spans.front().start_ns;
  // Per kernel: how much later than every kernel that ended before it it ends ("adds"), and its
  // start against the latest end before its start ("lead"; negative: it overlapped).
  std::vector<size_t> by_end(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) by_end[i] = i;
  std::stable_sort(by_end.begin(), by_end.end(),
                   [&](size_t a, size_t b) { return spans[a].end_ns < spans[b].end_ns; });
  std::vector<double> adds(spans.size()), lead(spans.size());
  uint64_t latest = t0;
  for (const size_t i : by_end) {
    adds[i] = 1e-3 * static_cast<double>(spans[i].end_ns - std::min(spans[i].end_ns, latest));
    latest = std::max(latest, spans[i].end_ns);
  }
  uint64_t latest_end = t0;
  double busy_us = 0;  // union of the kernel spans
  uint64_t busy_to = t0;
  for (size_t i = 0; i < spans.size(); ++i) {
    lead[i] = 1e-3 * (static_cast<double>(spans[i].start_ns) - static_cast<double>(latest_end));
    if (i == 0) lead[i] = 0;
    const uint64_t from = std::max(busy_to, spans[i].start_ns);
    if (spans[i].end_ns > from) busy_us += 1e-3 * static_cast<double>(spans[i].end_ns - from);
    busy_to = std::max(busy_to, spans[i].end_ns);
    latest_end = std::max(latest_end, spans[i].end_ns);
  }
  struct Kind {
    int count = 0;
    double dur = 0, adds = 0, lead = 0;
    std::string grid, block;
  };
  std::map<std::pair<std::string, std::string>, Kind> kinds;  // (name, grid x block)
  for (size_t i = 0; i < spans.size(); ++i) {
    const KernelSpan& s = spans[i];
    const std::string grid = Dims(s.grid), block = Dims(s.block);
    Kind& k = kinds[{s.name, absl::StrCat(grid, "x", block)}];
    k.count += 1;
    k.dur += 1e-3 * static_cast<double>(s.end_ns - s.start_ns);
    k.adds += adds[i];
    k.lead += lead[i];
    k.grid = grid, k.block = block;
  }
  std::vector<std::pair<const std::pair<std::string, std::string>*, const Kind*>> order;
  for (const auto& [key, k] : kinds) order.push_back({&key, &k});
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second->adds > b.second->adds; });
  std::string out = absl::StrFormat(
      "{\"timeline\":\"step\",\"rows\":%d,\"kernels\":%d,\"kinds\":%d,\"span_us\":%.2f,"
      "\"busy_us\":%.2f}\n",
      rows, spans.size(), kinds.size(), 1e-3 * static_cast<double>(latest_end - t0), busy_us);
  for (const auto& [key, k] : order) {
    absl::StrAppendFormat(&out,
                          "{\"timeline\":\"kind\",\"kernel\":%s,\"grid\":\"%s\",\"block\":\"%s\","
                          "\"count\":%d,\"dur_us\":%.2f,\"adds_us\":%.2f,\"mean_dur_us\":%.3f,"
                          "\"mean_adds_us\":%.3f,\"mean_lead_us\":%.3f}\n",
                          JsonString(key->first), k->grid, k->block, k->count, k->dur, k->adds,
                          k->dur / k->count, k->adds / k->count, k->lead / k->count);
  }
  if (per_kernel) {
    for (size_t i = 0; i < spans.size(); ++i) {
      const KernelSpan& s = spans[i];
      absl::StrAppendFormat(
          &out,
          "{\"timeline\":\"kernel\",\"i\":%d,\"kernel\":%s,\"stream\":%u,\"start_us\":%.3f,"
          "\"dur_us\":%.3f,\"adds_us\":%.3f,\"lead_us\":%.3f}\n",
          i, JsonString(s.name), s.stream, 1e-3 * static_cast<double>(s.start_ns - t0),
          1e-3 * static_cast<double>(s.end_ns - s.start_ns), adds[i], lead[i]);
    }
  }
  return out;
}

}  // namespace stepserve::bench
