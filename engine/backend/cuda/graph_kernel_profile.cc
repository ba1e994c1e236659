// ProfileGraphKernels: the per-kernel marginal cost of a recorded step (graph_kernel_profile.h).
#include "engine/backend/cuda/graph_kernel_profile.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace stepserve {

std::string ShortKernelName(const char* mangled) {
  if (mangled == nullptr) return "(unnamed)";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), &std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  name = absl::StrReplaceAll(name, {{"stepserve::", ""},
                                    {"kernels::", ""},
                                    {"gemv_internal::", ""},
                                    {"(anonymous namespace)::", ""},
                                    {"__grid_constant__ ", ""}});
  constexpr size_t kMaxName = 200;
  if (name.size() > kMaxName) name = name.substr(0, kMaxName) + "...";
  return name;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  }
  return out + "\"";
}

namespace {

absl::Status Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return absl::InternalError(
      absl::StrFormat("graph kernel profile: %s: %s", what, cudaGetErrorString(err)));
}

// The kernel's name as the runtime has it, shortened (ShortKernelName).
std::string KernelName(const void* func) {
  const char* mangled = nullptr;
  if (func == nullptr || cudaFuncGetName(&mangled, func) != cudaSuccess || mangled == nullptr) {
    (void)cudaGetLastError();
    return "(unnamed)";
  }
  return ShortKernelName(mangled);
}

// Mean microseconds per replay over `replays` back-to-back replays, after one untimed replay.
absl::StatusOr<double> TimeReplays(cudaGraphExec_t exec, cudaStream_t stream, int replays,
                                   cudaEvent_t start, cudaEvent_t stop) {
  absl::Status s = Check(cudaGraphLaunch(exec, stream), "warm-up replay");
  if (!s.ok()) return s;
  if (s = Check(cudaEventRecord(start, stream), "event"); !s.ok()) return s;
  for (int i = 0; i < replays; ++i) {
    if (s = Check(cudaGraphLaunch(exec, stream), "replay"); !s.ok()) return s;
  }
  if (s = Check(cudaEventRecord(stop, stream), "event"); !s.ok()) return s;
  if (s = Check(cudaEventSynchronize(stop), "synchronize"); !s.ok()) return s;
  float ms = 0;
  if (s = Check(cudaEventElapsedTime(&ms, start, stop), "elapsed time"); !s.ok()) return s;
  return 1e3 * static_cast<double>(ms) / replays;
}

struct KernelKind {
  std::vector<cudaGraphNode_t> nodes;
  std::string name;
  dim3 grid, block;
};

}  // namespace

absl::StatusOr<GraphKernelProfile> ProfileGraphKernels(cudaGraph_t graph, cudaGraphExec_t exec,
                                                       cudaStream_t stream, int replays) {
  if (graph == nullptr || exec == nullptr || replays < 1) {
    return absl::InvalidArgumentError("graph kernel profile: no graph, or replays < 1");
  }
  size_t count = 0;
  absl::Status s = Check(cudaGraphGetNodes(graph, nullptr, &count), "node count");
  if (!s.ok()) return s;
  std::vector<cudaGraphNode_t> nodes(count);
  if (s = Check(cudaGraphGetNodes(graph, nodes.data(), &count), "nodes"); !s.ok()) return s;
  GraphKernelProfile profile;
  profile.replays = replays;
  // Kinds keyed by (function, grid, block), in the order of first appearance.
  using Key = std::tuple<const void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned>;
  std::map<Key, size_t> index;
  std::vector<KernelKind> kinds;
  KernelKind unreadable{{}, "(kernels whose parameters the runtime cannot read)", dim3(0), dim3(0)};
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    if (s = Check(cudaGraphNodeGetType(node, &type), "node type"); !s.ok()) return s;
    if (type != cudaGraphNodeTypeKernel) {
      ++profile.other_nodes;
      continue;
    }
    ++profile.kernel_nodes;
    cudaKernelNodeParams params{};
    if (cudaGraphKernelNodeGetParams(node, &params) != cudaSuccess) {
      (void)cudaGetLastError();  // e.g. a library's kernel launched through the driver API
      unreadable.nodes.push_back(node);
      continue;
    }
    const Key key{params.func,       params.gridDim.x,  params.gridDim.y, params.gridDim.z,
                  params.blockDim.x, params.blockDim.y, params.blockDim.z};
    auto [it, fresh] = index.emplace(key, kinds.size());
    if (fresh) {
      kinds.push_back({{}, KernelName(params.func), params.gridDim, params.blockDim});
    }
    kinds[it->second].nodes.push_back(node);
  }
  if (!unreadable.nodes.empty()) kinds.push_back(std::move(unreadable));

  cudaEvent_t start = nullptr, stop = nullptr;
  if (s = Check(cudaEventCreate(&start), "event"); !s.ok()) return s;
  if (s = Check(cudaEventCreate(&stop), "event"); !s.ok()) {
    cudaEventDestroy(start);
    return s;
  }
  const auto set_enabled = [&](const KernelKind& kind, unsigned on) {
    for (cudaGraphNode_t node : kind.nodes) {
      absl::Status e = Check(cudaGraphNodeSetEnabled(exec, node, on), "enable / disable a node");
      if (!e.ok()) return e;
    }
    return absl::OkStatus();
  };
  std::vector<double> full;
  const auto sweep = [&]() -> absl::Status {
    absl::StatusOr<double> t = TimeReplays(exec, stream, replays, start, stop);
    if (!t.ok()) return t.status();
    full.push_back(*t);
    for (const KernelKind& kind : kinds) {
      if (absl::Status e = set_enabled(kind, 0); !e.ok()) return e;
      absl::StatusOr<double> without = TimeReplays(exec, stream, replays, start, stop);
      // Re-enable before anything else, so that an error leaves the graph whole.
      if (absl::Status e = set_enabled(kind, 1); !e.ok()) return e;
      if (!without.ok()) return without.status();
      if (t = TimeReplays(exec, stream, replays, start, stop); !t.ok()) return t.status();
      full.push_back(*t);
      GraphKernelCost cost;
      cost.kernel = kind.name;
      cost.grid = kind.grid;
      cost.block = kind.block;
      cost.nodes = static_cast<int>(kind.nodes.size());
      cost.without_us = *without;
      profile.kernels.push_back(std::move(cost));
    }
    return absl::OkStatus();
  };
  s = sweep();
  if (!s.ok()) {
    // A failure part way through a kind may have left some of its nodes disabled: enable every
    // node again (best effort), so the step's own replays compute the real thing.
    for (const KernelKind& kind : kinds) {
      for (cudaGraphNode_t node : kind.nodes) (void)cudaGraphNodeSetEnabled(exec, node, 1);
    }
    (void)cudaGetLastError();
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!s.ok()) return s;
  std::sort(full.begin(), full.end());
  profile.full_us = full[full.size() / 2];
  profile.full_min_us = full.front();
  profile.full_max_us = full.back();
  for (GraphKernelCost& cost : profile.kernels) {
    cost.marginal_us = profile.full_us - cost.without_us;
  }
  std::stable_sort(profile.kernels.begin(), profile.kernels.end(),
                   [](const GraphKernelCost& a, const GraphKernelCost& b) {
                     return a.marginal_us > b.marginal_us;
                   });
  return profile;
}

std::string GraphKernelProfileJson(const GraphKernelProfile& profile) {
  double sum = 0;
  for (const GraphKernelCost& cost : profile.kernels) sum += cost.marginal_us;
  std::string out = absl::StrFormat(
      "{\"graph_profile\":\"step\",\"rows\":%d,\"kernel_nodes\":%d,\"other_nodes\":%d,"
      "\"kinds\":%d,\"replays\":%d,\"full_us\":%.2f,\"full_min_us\":%.2f,\"full_max_us\":%.2f,"
      "\"sum_marginal_us\":%.2f}\n",
      profile.rows, profile.kernel_nodes, profile.other_nodes,
      static_cast<int>(profile.kernels.size()), profile.replays, profile.full_us,
      profile.full_min_us, profile.full_max_us, sum);
  for (const GraphKernelCost& cost : profile.kernels) {
    absl::StrAppendFormat(
        &out,
        "{\"graph_profile\":\"kernel\",\"rows\":%d,\"marginal_us\":%.2f,\"per_node_us\":%.3f,"
        "\"nodes\":%d,\"without_us\":%.2f,\"grid\":\"%u,%u,%u\",\"block\":\"%u,%u,%u\","
        "\"kernel\":%s}\n",
        profile.rows, cost.marginal_us, cost.marginal_us / std::max(cost.nodes, 1), cost.nodes,
        cost.without_us, cost.grid.x, cost.grid.y, cost.grid.z, cost.block.x, cost.block.y,
        cost.block.z, JsonString(cost.kernel));
  }
  return out;
}

}  // namespace stepserve
