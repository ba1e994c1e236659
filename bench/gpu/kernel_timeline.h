// The device's own timeline of a stretch of work: every kernel's start and end (graph kernels
// included) through CUPTI's activity API, and a summary that attributes the stretch's time to
// kernels by where each one ends.
//
// Why: the graph profile (engine/backend/cuda/graph_kernel_profile.h) says what removing a kernel
// kind saves, but its marginals add up to ~70% of a batch-1 step (H100, session 32: 1650 of 2402
// us) and cannot say where the rest goes - kernel boundaries, the PDL overlap, a side stream's
// branch. A timeline of one replayed step shows each kernel's span and how much later than the
// previous kernel it finishes. Nsight Systems cannot make reports on the device hosts
// (../.library/device/KINDS.md), so bench_model records the timeline itself.
#ifndef STEPSERVE_BENCH_GPU_KERNEL_TIMELINE_H_
#define STEPSERVE_BENCH_GPU_KERNEL_TIMELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stepserve::bench {

struct KernelSpan {
  std::string name;  // demangled, the project's namespaces dropped
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t stream = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
};

// Starts recording kernel activity on every device of the process (one recording at a time).
absl::Status StartKernelTimeline();
// Drops what was recorded so far and keeps recording (to leave out a warm-up stretch).
absl::Status RestartKernelTimeline();
// Stops recording; the kernels recorded since the last (re)start, by start time.
absl::StatusOr<std::vector<KernelSpan>> StopKernelTimeline();

// JSON lines: a header {"timeline":"step", rows, kernels, span_us, busy_us}, one line per kernel
// kind ({"timeline":"kind", ...}: count, summed duration, summed "adds" - the time from the latest
// end of the kernels that finished before it to its own end, so a kind's adds sum to the part of
// the step that ends in its kernels - and mean lead: its start minus the previous kernel's end,
// negative where it launched early under PDL), largest adds first, then (with `per_kernel`) one
// line per kernel in start order.
std::string KernelTimelineJson(const std::vector<KernelSpan>& spans, int64_t rows, bool per_kernel);

}  // namespace stepserve::bench

#endif  // STEPSERVE_BENCH_GPU_KERNEL_TIMELINE_H_
