// Optimised router and grouped expert FFN. The expert FFN is bound by reading expert weights, so
// rows are grouped by expert (counting sort) and each selected expert's matrices are read once per
// call for all of its rows. Work is split over (expert, output-row chunk) tasks so that a decode
// step with one row and k experts still spreads over every thread.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/common/vec.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/matmul.h"
#include "kernels/moe/moe.h"

namespace stepserve::kernels {
namespace {

constexpr int64_t kRowsPerTask = 16;  // output rows of one expert matrix per task
constexpr int64_t kMaxTopK = 64;      // selection state lives on the stack

}  // namespace

KernelStatus RouterCpu(const RouterArgs& a, ThreadPool* pool) {
  if (KernelStatus s = ValidateRouter(a); s != KernelStatus::kOk) return s;
  if (a.top_k > kMaxTopK) return KernelStatus::kTooLarge;
  const int64_t n = a.n_experts;
  auto body = [&](int64_t begin, int64_t end) {
    float best_score[kMaxTopK];
    float best_pi[kMaxTopK];
    int32_t best_id[kMaxTopK];
    for (int64_t r = begin; r < end; ++r) {
      const float* logits = a.logits + r * a.logits_stride;
      float softmax_max = 0.0f;
      float softmax_inv_sum = 1.0f;
      if (a.gating == GatingFunc::kSoftmax) {
        softmax_max = *std::max_element(logits, logits + n);
        float sum = 0.0f;
        for (int64_t e = 0; e < n; ++e) sum += std::exp(logits[e] - softmax_max);
        softmax_inv_sum = 1.0f / sum;
      }
      int64_t filled = 0;
      for (int64_t e = 0; e < n; ++e) {
        const float pi = a.gating == GatingFunc::kSigmoid
                             ? 1.0f / (1.0f + std::exp(-logits[e]))
                             : std::exp(logits[e] - softmax_max) * softmax_inv_sum;
        const float score = pi + (a.bias != nullptr ? a.bias[e] : 0.0f);
        // Insertion into the sorted top-k; strict > keeps the lower id first on ties.
        if (filled == a.top_k && !(score > best_score[filled - 1])) continue;
        int64_t pos = filled < a.top_k ? filled++ : filled - 1;
        while (pos > 0 && score > best_score[pos - 1]) {
          best_score[pos] = best_score[pos - 1];
          best_pi[pos] = best_pi[pos - 1];
          best_id[pos] = best_id[pos - 1];
          --pos;
        }
        best_score[pos] = score;
        best_pi[pos] = pi;
        best_id[pos] = static_cast<int32_t>(e);
      }
      float sum = 0.0f;
      for (int64_t k = 0; k < a.top_k; ++k) sum += best_pi[k];
      float factor = a.normalize ? 1.0f / std::max(sum, kRouterNormFloor) : 1.0f;
      if (a.scale != 0.0f && a.scale != 1.0f) factor *= a.scale;
      for (int64_t k = 0; k < a.top_k; ++k) {
        a.ids[r * a.top_k + k] = best_id[k];
        a.weights[r * a.top_k + k] = best_pi[k] * factor;
      }
    }
  };
  if (pool == nullptr || a.rows * n < (1 << 14)) {
    body(0, a.rows);
  } else {
    pool->ParallelFor(a.rows, 8, body);
  }
  return KernelStatus::kOk;
}

KernelStatus MoeExpertsCpu(const MoeExpertsArgs& a, ThreadPool* pool) {
  if (KernelStatus s = ValidateMoeExperts(a); s != KernelStatus::kOk) return s;
  const int64_t pairs = a.rows * a.top_k;
  if (pairs == 0) return KernelStatus::kOk;
  if (a.workspace == nullptr || a.index_workspace == nullptr ||
      a.workspace_floats < MoeExpertsWorkspaceFloats(a.rows, a.top_k, a.n_embd, a.n_ff) ||
      a.index_workspace_len < MoeExpertsIndexWorkspaceLen(a.rows, a.top_k, a.n_experts)) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t d = a.n_embd;
  const int64_t ff = a.n_ff;
  const int64_t n_exp = a.n_experts;

  // Counting sort of (row, slot) pairs by expert; stable, so each expert's rows stay in order.
  int32_t* order = a.index_workspace;
  int32_t* offsets = order + pairs;       // [E + 1]
  int32_t* active = offsets + n_exp + 1;  // experts with at least one row
  std::memset(offsets, 0, (n_exp + 1) * sizeof(int32_t));
  for (int64_t i = 0; i < pairs; ++i) ++offsets[a.ids[i] + 1];
  int64_t n_active = 0;
  for (int64_t e = 0; e < n_exp; ++e) {
    if (offsets[e + 1] > 0) active[n_active++] = static_cast<int32_t>(e);
    offsets[e + 1] += offsets[e];
  }
  // Place pairs using offsets[e] as a cursor, then shift the cursors back into start offsets.
  for (int64_t i = 0; i < pairs; ++i) order[offsets[a.ids[i]]++] = static_cast<int32_t>(i);
  for (int64_t e = n_exp; e > 0; --e) offsets[e] = offsets[e - 1];
  offsets[0] = 0;

  float* xs = a.workspace;      // [pairs][d] gathered inputs, expert-grouped
  float* gz = xs + pairs * d;   // [pairs][ff] gate outputs, then z
  float* us = gz + pairs * ff;  // [pairs][ff] up outputs
  float* ds = us + pairs * ff;  // [pairs][d] down outputs
  auto run = [&](int64_t n, int64_t min_chunk, const auto& body) {
    if (pool == nullptr) {
      body(0, n);
    } else {
      pool->ParallelFor(n, min_chunk, body);
    }
  };

  run(pairs, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(xs + i * d, a.x + (order[i] / a.top_k) * a.x_stride, d * sizeof(float));
    }
  });

  // Gate and up for a chunk of n_ff rows of one expert, then SwiGLU on exactly those columns.
  const int64_t ff_tasks = (ff + kRowsPerTask - 1) / kRowsPerTask;
  run(n_active * ff_tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t e = active[t / ff_tasks];
      const int64_t o0 = (t % ff_tasks) * kRowsPerTask;
      const int64_t o1 = std::min(ff, o0 + kRowsPerTask);
      const int64_t first = offsets[e];
      const int64_t count = offsets[e + 1] - first;
      MatmulArgs m;
      m.in = d;
      m.out = ff;
      m.x = xs + first * d;
      m.x_stride = d;
      m.rows = count;
      m.y_stride = ff;
      m.type = a.gate.type;
      m.w = static_cast<const uint8_t*>(a.gate.data) + e * a.gate.expert_bytes;
      m.w_row_bytes = a.gate.row_bytes;
      m.y = gz + first * ff;
      MatmulCpuRange(m, o0, o1);
      m.type = a.up.type;
      m.w = static_cast<const uint8_t*>(a.up.data) + e * a.up.expert_bytes;
      m.w_row_bytes = a.up.row_bytes;
      m.y = us + first * ff;
      MatmulCpuRange(m, o0, o1);
      for (int64_t i = first; i < first + count; ++i) {
        SwiGluRowCpu(gz + i * ff + o0, us + i * ff + o0, gz + i * ff + o0, o1 - o0, a.limit);
      }
    }
  });

  const int64_t d_tasks = (d + kRowsPerTask - 1) / kRowsPerTask;
  run(n_active * d_tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t e = active[t / d_tasks];
      const int64_t o0 = (t % d_tasks) * kRowsPerTask;
      const int64_t first = offsets[e];
      MatmulArgs m;
      m.type = a.down.type;
      m.w = static_cast<const uint8_t*>(a.down.data) + e * a.down.expert_bytes;
      m.w_row_bytes = a.down.row_bytes;
      m.in = ff;
      m.out = d;
      m.x = gz + first * ff;
      m.x_stride = ff;
      m.rows = offsets[e + 1] - first;
      m.y = ds + first * d;
      m.y_stride = d;
      MatmulCpuRange(m, o0, std::min(d, o0 + kRowsPerTask));
    }
  });

  // Weighted sum per row in slot order (deterministic, no write races): find each pair's place.
  int32_t* where = active + n_exp;  // [pairs]: position of pair i in the grouped order
  for (int64_t i = 0; i < pairs; ++i) where[order[i]] = static_cast<int32_t>(i);
  run(a.rows, 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* y = a.y + r * a.y_stride;
      for (int64_t k = 0; k < a.top_k; ++k) {
        VecAxpy(a.weights[r * a.top_k + k], ds + where[r * a.top_k + k] * d, y, d);
      }
    }
  });
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
