// What each kernel of a recorded decode step costs inside the step: every distinct kernel
// (function, grid and block) of the step graph is disabled in turn, the graph replayed, and the
// step time compared with the full step's.
//
// Why: a kernel profiler runs a graph's kernels one at a time, so its per-kernel times add up to
// more than the step (session 30's batch-1 table: ~147 us per MoE layer under ncu against ~100 us
// of real step time), and the overlap that programmatic dependent launch buys is invisible there.
// The difference a kernel's absence makes to the replayed step is its marginal cost with that
// overlap in place: the measure that says which kernel to fuse or speed up first. Results are for
// timing only: a replay with kernels disabled computes garbage, so a full replay follows each
// variant (the step's own replay comes after the sweep, so its outputs are the real ones).
#ifndef STEPSERVE_ENGINE_BACKEND_CUDA_GRAPH_KERNEL_PROFILE_H_
#define STEPSERVE_ENGINE_BACKEND_CUDA_GRAPH_KERNEL_PROFILE_H_

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stepserve {

struct GraphKernelCost {
  std::string kernel;  // demangled, namespaces shortened; "(unnamed)" where the runtime has none
  dim3 grid, block;
  int nodes = 0;           // kernel nodes of this kind in the step
  double without_us = 0;   // mean step time with those nodes disabled
  double marginal_us = 0;  // full step (median) - without_us
};

struct GraphKernelProfile {
  int64_t rows = 0;      // the step's token rows (set by the caller)
  int kernel_nodes = 0;  // all kernel nodes of the graph
  int other_nodes = 0;   // memcpy / memset / empty nodes (never disabled)
  int replays = 0;       // timed replays per sample
  double full_us = 0;    // median of the full-step samples
  double full_min_us = 0, full_max_us = 0;
  std::vector<GraphKernelCost> kernels;  // by marginal cost, largest first
};

// Runs the sweep on `exec` (instantiated from `graph`, whose nodes identify the exec's) on
// `stream`: per kernel kind, one untimed and `replays` timed replays with its nodes disabled,
// then one untimed and `replays` timed full replays (a full-step sample). Leaves every node
// enabled; the stream is synchronized on return.
absl::StatusOr<GraphKernelProfile> ProfileGraphKernels(cudaGraph_t graph, cudaGraphExec_t exec,
                                                       cudaStream_t stream, int replays);

// One JSON object per line: a header line with the full step and one line per kernel kind.
std::string GraphKernelProfileJson(const GraphKernelProfile& profile);

// A kernel's mangled name demangled, without the project's namespaces (the same for every kernel)
// and cut to 200 characters; also bench/gpu/kernel_timeline's names.
std::string ShortKernelName(const char* mangled);
// `s` as a JSON string literal (quotes and backslashes escaped, control characters as spaces).
std::string JsonString(const std::string& s);

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_BACKEND_CUDA_GRAPH_KERNEL_PROFILE_H_
