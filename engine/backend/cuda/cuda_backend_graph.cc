// CudaBackend step graphs: a decode step's ops recorded once as a CUDA graph and replayed.
//
// Why: a 45-layer decode step is ~1800 kernel launches and small copies; enqueued one by one the
// host, not the GPU, sets the pace (each launch costs microseconds of driver time). Replaying a
// graph is one launch.
//
// How: the model describes each step (StepDescription: ids, positions, the two sequence lists and
// a key for everything else its launches depend on). The first step with a key runs eagerly (it
// grows every scratch area to its size), the second is recorded (stream capture) and each later
// one replays the recording. The ops of a recorded step never upload on their own: they stage
// their batch inputs (ids, positions, KV slots, attention rows and block tables) into one shared
// input area through StageStepInput, which keeps a recipe per input. Before a replay the recipes
// rebuild the inputs from the new description into the pinned mirror of the area, one copy moves
// it to the device, then the graph runs. A recipe that no longer fits its recorded launch shape
// (split-K count changed, block tables outgrew their room) aborts the replay and the step is
// recorded again; a scratch area that moves invalidates every graph (scratch_epoch_).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/base/status_macros.h"
#include "kernels/matmul/moe_gemv_cuda.h"

namespace stepserve {

struct CudaBackend::StepGraph {
  struct Input {
    std::string key;
    size_t offset = 0;    // in the input area
    size_t capacity = 0;  // bytes reserved (room for growth between recordings)
    StepInputRecipe recipe;
  };
  int seen = 0;
  int failed_recordings = 0;  // ops that failed while recording; kMaxFailedRecordings gives up
  bool not_recordable = false;
  uint64_t epoch = 0;
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;  // what exec was instantiated from, kept for ArmGraphProfile
  std::vector<Input> inputs;
  size_t used = 0;  // bytes of the input area the inputs span

  void Reset() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
    inputs.clear();
    used = 0;
  }
  ~StepGraph() { Reset(); }
};

struct CudaBackend::StepGraphs {
  std::unordered_map<uint64_t, std::unique_ptr<StepGraph>> by_key;
  void* device = nullptr;  // the input area the recorded kernels read
  void* pinned = nullptr;  // its host mirror, copied up before each recorded or replayed step
  size_t bytes = 0;
  cudaEvent_t uploaded = nullptr;  // recorded after the last copy out of `pinned`
  std::vector<uint8_t> rebuilt;    // a recipe's output

  ~StepGraphs() {
    by_key.clear();
    if (uploaded != nullptr) {
      cudaEventSynchronize(uploaded);
      cudaEventDestroy(uploaded);
    }
    if (device != nullptr) cudaFree(device);
    if (pinned != nullptr) cudaFreeHost(pinned);
  }
};

namespace {

constexpr size_t kMaxGraphs = 64;  // distinct step keys kept; beyond that the cache starts over
// A recording can fail once for a passing reason (a scratch area that had to grow while
// recording: the eager re-run grows it); after this many the key stays eager.
constexpr int kMaxFailedRecordings = 3;

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

// An upper bound of the input area a step needs: ids, positions, and per sequence list the KV
// slots (8 bytes a row) and attention rows (16 bytes a row) plus block tables, twice over (room
// for recipes that grow before the step is recorded again).
size_t InputAreaBound(const StepDescription& step) {
  size_t bytes = 2 * (step.ids.size_bytes() + step.positions.size_bytes()) + 4096;
  for (const auto& list : step.seq_lists) {
    size_t tables = 0;
    for (const SequenceSlice& seq : list) tables += seq.block_table.size();
    bytes += 4 * (step.positions.size() * 24 + tables * 4) + 4 * 4096;
  }
  return bytes;
}

}  // namespace

absl::Status CudaBackend::StepPositionsRecipe(const StepDescription& step,
                                              std::vector<uint8_t>* bytes) {
  for (const int32_t position : step.positions) {
    if (position < 0) {
      return absl::OutOfRangeError(absl::StrFormat("step position %d is negative", position));
    }
  }
  const auto* begin = reinterpret_cast<const uint8_t*>(step.positions.data());
  bytes->assign(begin, begin + step.positions.size_bytes());
  return absl::OkStatus();
}

int CudaBackend::StepSeqList(std::span<const SequenceSlice> seqs) const {
  for (int i = 0; i < 2; ++i) {
    const auto& list = recording_step_.seq_lists[i];
    if (seqs.data() == list.data() && seqs.size() == list.size()) return i;
  }
  return -1;
}

absl::Status CudaBackend::AbandonRecording(const std::string& why) {
  if (recording_ == nullptr) return absl::OkStatus();
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream_, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  (void)cudaGetLastError();
  recording_->Reset();
  recording_->not_recordable = true;
  recording_ = nullptr;
  return absl::UnavailableError(absl::StrFormat("step recording abandoned: %s", why));
}

absl::StatusOr<void*> CudaBackend::StageStepInput(const std::string& key, const void* host,
                                                  size_t bytes, const char* what,
                                                  StepInputRecipe recipe) {
  StepGraph& g = *recording_;
  StepGraphs& area = *graphs_;
  for (const StepGraph::Input& in : g.inputs) {
    if (in.key != key) continue;
    // Same key, same step: the bytes must agree, or the key does not identify the input.
    if (bytes > in.capacity ||
        std::memcmp(static_cast<uint8_t*>(area.pinned) + in.offset, host, bytes) != 0) {
      return AbandonRecording(absl::StrFormat("%s: two different inputs under key %s", what, key));
    }
    return static_cast<uint8_t*>(area.device) + in.offset;
  }
  const size_t capacity = RoundUp(bytes + bytes / 4 + 1024, 256);
  if (g.used + capacity > area.bytes) {
    return AbandonRecording(absl::StrFormat("%s: the step's inputs outgrew the input area", what));
  }
  StepGraph::Input in{key, g.used, capacity, std::move(recipe)};
  if (bytes > 0) std::memcpy(static_cast<uint8_t*>(area.pinned) + in.offset, host, bytes);
  g.used += capacity;
  g.inputs.push_back(std::move(in));
  return static_cast<uint8_t*>(area.device) + g.inputs.back().offset;
}

absl::StatusOr<StepMode> CudaBackend::BeginStep(const StepDescription& step) {
  ForgetPrequantized();
  // Beyond kMoeGemvMaxTokens rows, and in exact mode, MoeExperts groups the experts on the host
  // (a round trip a graph cannot hold): such steps stay eager without trying.
  if (!graphs_enabled_ || exact_activations_ ||
      static_cast<int64_t>(step.ids.size()) > kernels::kMoeGemvMaxTokens) {
    return StepMode::kEager;
  }
  if (recording_ != nullptr) {
    return absl::FailedPreconditionError("BeginStep: the previous step is still being recorded");
  }
  if (!graphs_) graphs_ = std::make_shared<StepGraphs>();
  StepGraphs& area = *graphs_;
  const uint64_t key = step.key ^ (0x9E3779B97F4A7C15ull * (step.ids.size() + 1));
  // Graphs are destroyed only with the stream idle: a step without downloads (no logit rows)
  // leaves its graph running when the next BeginStep comes.
  std::unique_ptr<StepGraph>& slot = area.by_key[key];
  if (!slot) {
    if (area.by_key.size() > kMaxGraphs) {
      RETURN_IF_ERROR(CudaResult(TimedWait(stream_, nullptr), "BeginStep"));
      area.by_key.clear();
      return StepMode::kEager;
    }
    slot = std::make_unique<StepGraph>();
  }
  StepGraph& g = *slot;
  if (g.epoch != scratch_epoch_) {  // a scratch area moved since the recording
    if (g.exec != nullptr) RETURN_IF_ERROR(CudaResult(TimedWait(stream_, nullptr), "BeginStep"));
    g.Reset();
    g.epoch = scratch_epoch_;
  }
  if (g.not_recordable) return StepMode::kEager;
  // The pinned mirror is rewritten below: the previous step's copy out of it must be done.
  if (area.uploaded != nullptr) {
    RETURN_IF_ERROR(CudaResult(TimedWait(nullptr, area.uploaded), "BeginStep"));
  }
  if (g.exec != nullptr) {
    absl::Status rebuilt = absl::OkStatus();
    for (const StepGraph::Input& in : g.inputs) {
      area.rebuilt.clear();
      rebuilt = in.recipe(step, &area.rebuilt);
      if (!rebuilt.ok()) break;
      if (area.rebuilt.size() > in.capacity) {
        rebuilt = absl::AbortedError("step input outgrew its recorded room");
        break;
      }
      if (!area.rebuilt.empty()) {
        std::memcpy(static_cast<uint8_t*>(area.pinned) + in.offset, area.rebuilt.data(),
                    area.rebuilt.size());
      }
    }
    if (rebuilt.ok()) {
      RETURN_IF_ERROR(CudaResult(
          cudaMemcpyAsync(area.device, area.pinned, g.used, cudaMemcpyHostToDevice, stream_),
          "BeginStep: inputs"));
      RETURN_IF_ERROR(CudaResult(cudaEventRecord(area.uploaded, stream_), "BeginStep"));
      if (profile_replays_ > 0 && g.graph != nullptr) {
        // The sweep replays this step's graph with its inputs in place; the step's own replay
        // below then recomputes every output.
        absl::StatusOr<GraphKernelProfile> profile =
            ProfileGraphKernels(g.graph, g.exec, stream_, std::exchange(profile_replays_, 0));
        if (profile.ok()) profile->rows = static_cast<int64_t>(step.ids.size());
        graph_profile_ = std::move(profile);
      }
      RETURN_IF_ERROR(CudaResult(cudaGraphLaunch(g.exec, stream_), "BeginStep: graph launch"));
      ++replayed_steps_;
      return StepMode::kReplayed;
    }
    if (!absl::IsAborted(rebuilt)) return rebuilt;  // a bad input: the eager step would fail too
    // The launch shapes changed: record this step again.
    RETURN_IF_ERROR(CudaResult(TimedWait(stream_, nullptr), "BeginStep"));
    g.Reset();
  } else if (g.seen++ == 0) {
    return StepMode::kEager;  // first sighting: let every scratch area grow to its size
  }
  // Record. The input area must not move once kernels hold its address.
  const size_t bound = InputAreaBound(step);
  if (area.bytes < bound) {
    const size_t grown = std::max(bound, 2 * area.bytes);
    RETURN_IF_ERROR(CudaResult(TimedWait(stream_, nullptr), "BeginStep"));
    if (area.device != nullptr) cudaFree(area.device);
    if (area.pinned != nullptr) cudaFreeHost(area.pinned);
    area.device = area.pinned = nullptr;
    area.bytes = 0;
    RETURN_IF_ERROR(CudaResult(cudaMalloc(&area.device, grown), "BeginStep: input area"));
    RETURN_IF_ERROR(CudaResult(cudaHostAlloc(&area.pinned, grown, cudaHostAllocDefault),
                               "BeginStep: pinned input area"));
    area.bytes = grown;
    RETURN_IF_ERROR(PoisonFresh(area.device, grown, "BeginStep: input area"));
    ++scratch_epoch_;  // other graphs read the old area
    g.epoch = scratch_epoch_;
  }
  if (area.uploaded == nullptr) {
    RETURN_IF_ERROR(
        CudaResult(cudaEventCreateWithFlags(&area.uploaded, cudaEventDisableTiming), "BeginStep"));
  }
  g.Reset();
  const cudaError_t err = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    g.not_recordable = true;
    return StepMode::kEager;
  }
  recording_ = &g;
  recording_step_ = step;
  return StepMode::kRecord;
}

absl::Status CudaBackend::EndStep(bool enqueued_all) {
  ForgetPrequantized();
  // A side branch left open or unjoined (an op failed inside it): the stream, and a capture, must
  // end joined.
  const absl::Status joined = JoinSide();
  if (!joined.ok()) enqueued_all = false;
  if (recording_ == nullptr) return joined;
  StepGraph& g = *recording_;
  if (!enqueued_all) {
    // An op failed while recording (an input it rejects, a scratch area that had to grow, or a
    // call a capture forbids): drop the recording; the caller re-runs the step eagerly. The next
    // step with the key records again, up to kMaxFailedRecordings times.
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    g.Reset();
    if (++g.failed_recordings >= kMaxFailedRecordings) {
      g.not_recordable = true;
    }
    recording_ = nullptr;
    return absl::OkStatus();
  }
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(stream_, &graph);
  recording_ = nullptr;
  if (err == cudaSuccess && graph != nullptr) {
    err = cudaGraphInstantiate(&g.exec, graph, 0);
  }
  if (err == cudaSuccess && g.exec != nullptr && keep_step_graphs_) {
    g.graph = std::exchange(graph, nullptr);
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (err != cudaSuccess || g.exec == nullptr) {
    (void)cudaGetLastError();
    g.Reset();
    g.not_recordable = true;
    return absl::UnavailableError(
        absl::StrFormat("step recording failed: %s", cudaGetErrorString(err)));
  }
  StepGraphs& area = *graphs_;
  RETURN_IF_ERROR(
      CudaResult(cudaMemcpyAsync(area.device, area.pinned, g.used, cudaMemcpyHostToDevice, stream_),
                 "EndStep: inputs"));
  RETURN_IF_ERROR(CudaResult(cudaEventRecord(area.uploaded, stream_), "EndStep"));
  ++recorded_steps_;
  return CudaResult(cudaGraphLaunch(g.exec, stream_), "EndStep: graph launch");
}

}  // namespace stepserve
