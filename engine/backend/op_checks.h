// Operand checks shared by every Backend implementation, so the CPU and CUDA backends reject bad
// shapes with the same precise messages ("RmsNorm: out is [4096, 3], expected [4096, 2]"), and
// the translation of checked views into the kernels' argument structs, which both backends hand
// to their own kernels (RmsNormCpu / RmsNormCuda, ...). Host only: the checks read the views,
// never the memory behind them (which may be device memory).
#ifndef STEPSERVE_ENGINE_BACKEND_OP_CHECKS_H_
#define STEPSERVE_ENGINE_BACKEND_OP_CHECKS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "engine/base/status_macros.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embed/embed.h"
#include "kernels/matmul/matmul.h"
#include "kernels/moe/moe.h"
#include "kernels/rms_norm/rms_norm.h"

namespace stepserve {

// `t` is a non-null F32 activation with a valid shape and row stride.
inline absl::Status CheckF32(const TensorView& t, const char* op, const char* operand) {
  if (t.data == nullptr)
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s is null", op, operand));
  if (t.type != GgmlType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s must be F32, is %s", op, operand, GgmlTypeName(t.type)));
  }
  if (t.ne[0] <= 0 || t.ne[1] < 0 || t.ne[2] < 1 || t.ne[3] < 1 ||
      (t.row_stride != 0 && (t.row_stride % 4 != 0 || t.row_stride < t.ne[0] * 4))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s has bad shape [%d, %d, %d, %d] / row stride %d", op, operand,
                        t.ne[0], t.ne[1], t.ne[2], t.ne[3], t.row_stride));
  }
  return absl::OkStatus();
}

// `t` is [cols, rows].
inline absl::Status CheckShape(const TensorView& t, int64_t cols, int64_t rows, const char* op,
                               const char* operand) {
  if (t.cols() != cols || t.rows() != rows) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s is [%d, %d], expected [%d, %d]", op,
                                                      operand, t.cols(), t.rows(), cols, rows));
  }
  return absl::OkStatus();
}

// `w` is a non-null F32 vector of `n` (norm weights).
inline absl::Status CheckF32Weight(const WeightView& w, int64_t n, const char* op,
                                   const char* operand) {
  if (w.data == nullptr || w.type != GgmlType::kF32 || w.ne[0] != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s must be an F32 vector of %d (is %s [%d])", op, operand, n,
                        GgmlTypeName(w.type), w.ne[0]));
  }
  return absl::OkStatus();
}

// ---- Per-op checks and kernel arguments (the Backend op of the same name). ----

inline absl::StatusOr<kernels::RmsNormArgs> RmsNormOpArgs(const TensorView& x,
                                                          const WeightView& weight, float eps,
                                                          const TensorView& out) {
  RETURN_IF_ERROR(CheckF32(x, "RmsNorm", "x"));
  RETURN_IF_ERROR(CheckF32(out, "RmsNorm", "out"));
  RETURN_IF_ERROR(CheckShape(out, x.cols(), x.rows(), "RmsNorm", "out"));
  RETURN_IF_ERROR(CheckF32Weight(weight, x.cols(), "RmsNorm", "weight"));
  kernels::RmsNormArgs a;
  a.x = x.f32();
  a.x_stride = x.stride_floats();
  a.y = out.f32();
  a.y_stride = out.stride_floats();
  a.rows = x.rows();
  a.n = x.cols();
  a.weight = static_cast<const float*>(weight.data);
  a.eps = eps;
  return a;
}

// Shapes of q and k (k optional: data == nullptr), the norm weights and the freq factors; the
// kernels check n_rot, base and the positions' values.
inline absl::Status CheckQkNormRope(const TensorView& q, const TensorView& k,
                                    const QkNormRopeParams& p, int64_t tokens) {
  const int64_t dh = p.head_dim;
  if (dh <= 0) return absl::InvalidArgumentError("QkNormRope: head_dim must be positive");
  if (!p.freq_factors.empty() && static_cast<int64_t>(p.freq_factors.size()) < p.n_rot / 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "QkNormRope: %d freq factors, need n_rot/2 = %d", p.freq_factors.size(), p.n_rot / 2));
  }
  struct Part {
    const TensorView* t;
    const WeightView* norm;
    const char* name;
  };
  for (const Part& part : {Part{&q, &p.q_norm, "q"}, Part{&k, &p.k_norm, "k"}}) {
    const TensorView& t = *part.t;
    if (t.data == nullptr && part.t == &k) continue;  // k is optional
    RETURN_IF_ERROR(CheckF32(t, "QkNormRope", part.name));
    if (t.cols() % dh != 0 || t.rows() != tokens) {
      return absl::InvalidArgumentError(
          absl::StrFormat("QkNormRope: %s is [%d, %d]; need a multiple of head_dim %d and %d rows",
                          part.name, t.cols(), t.rows(), dh, tokens));
    }
    RETURN_IF_ERROR(CheckF32Weight(*part.norm, dh, "QkNormRope", part.name));
  }
  return absl::OkStatus();
}

inline absl::StatusOr<kernels::HeadGateArgs> HeadGateOpArgs(const TensorView& o,
                                                            const TensorView& gate_logits,
                                                            int64_t head_dim) {
  RETURN_IF_ERROR(CheckF32(o, "HeadGate", "o"));
  RETURN_IF_ERROR(CheckF32(gate_logits, "HeadGate", "gate_logits"));
  if (head_dim <= 0 || o.cols() != gate_logits.cols() * head_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "HeadGate: o width %d != %d heads x head_dim %d", o.cols(), gate_logits.cols(), head_dim));
  }
  RETURN_IF_ERROR(CheckShape(gate_logits, gate_logits.cols(), o.rows(), "HeadGate", "gate"));
  kernels::HeadGateArgs a;
  a.o = o.f32();
  a.o_stride = o.stride_floats();
  a.gate = gate_logits.f32();
  a.gate_stride = gate_logits.stride_floats();
  a.rows = o.rows();
  a.heads = gate_logits.cols();
  a.head_dim = head_dim;
  return a;
}

inline absl::StatusOr<kernels::SwiGluArgs> SwiGluOpArgs(const TensorView& g, const TensorView& u,
                                                        float limit, const TensorView& z) {
  RETURN_IF_ERROR(CheckF32(g, "SwiGlu", "g"));
  RETURN_IF_ERROR(CheckF32(u, "SwiGlu", "u"));
  RETURN_IF_ERROR(CheckF32(z, "SwiGlu", "z"));
  RETURN_IF_ERROR(CheckShape(u, g.cols(), g.rows(), "SwiGlu", "u"));
  RETURN_IF_ERROR(CheckShape(z, g.cols(), g.rows(), "SwiGlu", "z"));
  kernels::SwiGluArgs a;
  a.g = g.f32();
  a.g_stride = g.stride_floats();
  a.u = u.f32();
  a.u_stride = u.stride_floats();
  a.z = z.f32();
  a.z_stride = z.stride_floats();
  a.rows = g.rows();
  a.n = g.cols();
  a.limit = limit;
  return a;
}

inline absl::StatusOr<kernels::AddArgs> AddOpArgs(const TensorView& a, const TensorView& b,
                                                  const TensorView& y) {
  RETURN_IF_ERROR(CheckF32(a, "Add", "a"));
  RETURN_IF_ERROR(CheckF32(b, "Add", "b"));
  RETURN_IF_ERROR(CheckF32(y, "Add", "y"));
  RETURN_IF_ERROR(CheckShape(b, a.cols(), a.rows(), "Add", "b"));
  RETURN_IF_ERROR(CheckShape(y, a.cols(), a.rows(), "Add", "y"));
  kernels::AddArgs args;
  args.a = a.f32();
  args.a_stride = a.stride_floats();
  args.b = b.f32();
  args.b_stride = b.stride_floats();
  args.y = y.f32();
  args.y_stride = y.stride_floats();
  args.rows = a.rows();
  args.n = a.cols();
  return args;
}

inline absl::StatusOr<kernels::LogitsTopKArgs> LogitsTopKOpArgs(const TensorView& logits,
                                                                int32_t k,
                                                                const LogitsTopKOutputs& out) {
  RETURN_IF_ERROR(CheckF32(logits, "LogitsTopK", "logits"));
  if (k < 1 || k > kernels::kLogitsTopKMaxK) {
    return absl::InvalidArgumentError(
        absl::StrFormat("LogitsTopK: k must be in [1, %d], got %d", kernels::kLogitsTopKMaxK, k));
  }
  kernels::LogitsTopKArgs a;
  a.logits = logits.f32();
  a.rows = logits.rows();
  a.vocab = logits.cols();
  a.row_stride = logits.stride_floats();
  a.k = k;
  a.top_ids = out.ids;
  a.top_logits = out.values;
  a.argmax = out.argmax;
  a.log_sum_exp = out.log_sum_exp;
  return a;
}

inline absl::StatusOr<kernels::RouterArgs> RouterOpArgs(const TensorView& logits,
                                                        const RouterParams& p,
                                                        std::span<int32_t> ids,
                                                        std::span<float> weights) {
  RETURN_IF_ERROR(CheckF32(logits, "RouterTopK", "logits"));
  const int64_t n = logits.rows() * p.top_k;
  if (static_cast<int64_t>(ids.size()) != n || static_cast<int64_t>(weights.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("RouterTopK: ids/weights hold %d/%d entries, need rows x top_k = %d",
                        ids.size(), weights.size(), n));
  }
  if (!p.bias.empty() && static_cast<int64_t>(p.bias.size()) != logits.cols()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RouterTopK: bias has %d entries for %d experts", p.bias.size(), logits.cols()));
  }
  kernels::RouterArgs a;
  a.logits = logits.f32();
  a.logits_stride = logits.stride_floats();
  a.rows = logits.rows();
  a.n_experts = logits.cols();
  a.bias = p.bias.empty() ? nullptr : p.bias.data();
  a.top_k = p.top_k;
  a.gating = p.gating;
  a.normalize = p.normalize;
  a.scale = p.scale;
  a.ids = ids.data();
  a.weights = weights.data();
  return a;
}

// k and v are [kv_heads * head_dim, rows]; every sequence row gets its cache slot (page *
// block_size + offset) in `slots`, -1 for rows no sequence owns. The returned args point at
// `slots`; the kernels check the slots' range.
inline absl::StatusOr<kernels::KvAppendArgs> AppendKvOpArgs(const TensorView& k,
                                                            const TensorView& v,
                                                            const AttentionBatch& batch,
                                                            const KvCacheView& cache,
                                                            std::vector<int64_t>* slots) {
  const int64_t width = cache.kv_heads * cache.head_dim;
  RETURN_IF_ERROR(CheckF32(k, "AppendKv", "k"));
  RETURN_IF_ERROR(CheckF32(v, "AppendKv", "v"));
  const int64_t rows = static_cast<int64_t>(batch.positions.size());
  RETURN_IF_ERROR(CheckShape(k, width, rows, "AppendKv", "k"));
  RETURN_IF_ERROR(CheckShape(v, width, rows, "AppendKv", "v"));
  if (cache.block_size <= 0) return absl::InvalidArgumentError("AppendKv: block_size <= 0");
  slots->assign(rows, -1);
  for (const SequenceSlice& seq : batch.seqs) {
    if (seq.q_begin < 0 || seq.q_count < 0 || seq.q_begin + seq.q_count > rows) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "AppendKv: sequence rows [%d, +%d) outside the %d rows", seq.q_begin, seq.q_count, rows));
    }
    for (int64_t r = seq.q_begin; r < seq.q_begin + seq.q_count; ++r) {
      const int64_t pos = batch.positions[r];
      const int64_t block = pos / cache.block_size;
      if (pos < 0 || pos >= seq.context_len ||
          block >= static_cast<int64_t>(seq.block_table.size()) || seq.block_table[block] < 0 ||
          seq.block_table[block] >= cache.num_blocks) {
        return absl::OutOfRangeError(absl::StrFormat(
            "AppendKv: row %d at position %d has no cache page (context %d, %d table entries)", r,
            pos, seq.context_len, seq.block_table.size()));
      }
      (*slots)[r] = int64_t{seq.block_table[block]} * cache.block_size + pos % cache.block_size;
    }
  }
  kernels::KvAppendArgs a;
  a.k = k.f32();
  a.k_stride = k.stride_floats();
  a.v = v.f32();
  a.v_stride = v.stride_floats();
  a.tokens = rows;
  a.slots = slots->data();
  a.kv = cache;
  return a;
}

// q and out are [heads * head_dim, rows] and the sequences' row ranges lie inside them; the
// sequences are translated into `seqs`, which the returned args point at (as at the batch's
// positions and block tables). The kernels check positions and block tables
// (ValidatePagedAttention).
inline absl::StatusOr<kernels::PagedAttentionArgs> AttentionOpArgs(
    const TensorView& q, const AttentionBatch& batch, const KvCacheView& cache,
    const AttentionParams& params, const TensorView& out,
    std::vector<kernels::AttentionSeq>* seqs) {
  RETURN_IF_ERROR(CheckF32(q, "Attention", "q"));
  RETURN_IF_ERROR(CheckF32(out, "Attention", "out"));
  const int64_t rows = static_cast<int64_t>(batch.positions.size());
  RETURN_IF_ERROR(CheckShape(q, q.cols(), rows, "Attention", "q"));
  RETURN_IF_ERROR(CheckShape(out, q.cols(), rows, "Attention", "out"));
  if (cache.head_dim <= 0 || q.cols() % cache.head_dim != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Attention: q width %d is not a multiple of head_dim %d", q.cols(), cache.head_dim));
  }
  seqs->clear();
  for (const SequenceSlice& seq : batch.seqs) {
    if (seq.q_begin < 0 || seq.q_count < 0 || seq.q_begin + seq.q_count > rows) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Attention: sequence rows [%d, +%d) outside the %d rows", seq.q_begin,
                          seq.q_count, rows));
    }
    kernels::AttentionSeq s;
    s.q_begin = seq.q_begin;
    s.q_count = seq.q_count;
    s.context_len = seq.context_len;
    s.block_table = seq.block_table.data();
    s.block_table_len = static_cast<int64_t>(seq.block_table.size());
    seqs->push_back(s);
  }
  kernels::PagedAttentionArgs a;
  a.q = q.f32();
  a.q_stride = q.stride_floats();
  a.out = out.f32();
  a.out_stride = out.stride_floats();
  a.positions = batch.positions.data();
  a.seqs = seqs->data();
  a.n_seqs = static_cast<int64_t>(seqs->size());
  a.heads = q.cols() / cache.head_dim;
  a.window = params.window;
  a.scale = params.scale;
  a.kv = cache;
  return a;
}

// x: [in, T], w: ne = [in, out] (2-D), y: [out, T]. The kernels check the type and block sizes.
inline absl::StatusOr<kernels::MatmulArgs> MatmulOpArgs(const TensorView& x, const WeightView& w,
                                                        const TensorView& y) {
  RETURN_IF_ERROR(CheckF32(x, "Matmul", "x"));
  RETURN_IF_ERROR(CheckF32(y, "Matmul", "y"));
  if (w.ne[0] != x.cols() || w.ne[2] != 1 || w.ne[3] != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Matmul: weight ne [%d, %d, %d] does not take x with %d columns", w.ne[0],
                        w.ne[1], w.ne[2], x.cols()));
  }
  RETURN_IF_ERROR(CheckShape(y, w.ne[1], x.rows(), "Matmul", "y"));
  kernels::MatmulArgs a;
  a.type = w.type;
  a.w = w.data;
  a.w_row_bytes = w.row_bytes();
  a.in = w.ne[0];
  a.out = w.ne[1];
  a.x = x.f32();
  a.x_stride = x.stride_floats();
  a.rows = x.rows();
  a.y = y.f32();
  a.y_stride = y.stride_floats();
  return a;
}

// out: [d, ids.size()] for a table ne = [d, n_vocab]; the ids' values are checked by the caller
// (CUDA) or the kernel (CPU).
inline absl::StatusOr<kernels::EmbedArgs> EmbedOpArgs(const WeightView& table,
                                                      std::span<const int32_t> ids,
                                                      const TensorView& out) {
  RETURN_IF_ERROR(CheckF32(out, "Embed", "out"));
  RETURN_IF_ERROR(CheckShape(out, table.ne[0], static_cast<int64_t>(ids.size()), "Embed", "out"));
  kernels::EmbedArgs a;
  a.type = table.type;
  a.table = table.data;
  a.row_bytes = table.row_bytes();
  a.n_vocab = table.ne[1];
  a.dim = table.ne[0];
  a.ids = ids.data();
  a.n_ids = static_cast<int64_t>(ids.size());
  a.out = out.f32();
  a.out_stride = out.stride_floats();
  return a;
}

// Shapes of x, y and the three expert tensors, the ids / weights counts; the workspaces are left
// to the backend.
inline absl::StatusOr<kernels::MoeExpertsArgs> MoeExpertsOpArgs(
    const TensorView& x, const ExpertWeights& e, std::span<const int32_t> ids,
    std::span<const float> weights, int64_t top_k, const TensorView& y) {
  RETURN_IF_ERROR(CheckF32(x, "MoeExperts", "x"));
  RETURN_IF_ERROR(CheckF32(y, "MoeExperts", "y"));
  RETURN_IF_ERROR(CheckShape(y, x.cols(), x.rows(), "MoeExperts", "y"));
  const int64_t d = x.cols();
  const int64_t ff = e.gate.ne[1];
  const int64_t n_exp = e.gate.ne[2];
  if (e.gate.ne[0] != d || e.up.ne[0] != d || e.up.ne[1] != ff || e.up.ne[2] != n_exp ||
      e.down.ne[0] != ff || e.down.ne[1] != d || e.down.ne[2] != n_exp) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MoeExperts: expert shapes gate [%d, %d, %d], up [%d, %d, %d], down [%d, %d, %d] do not "
        "match d = %d",
        e.gate.ne[0], e.gate.ne[1], e.gate.ne[2], e.up.ne[0], e.up.ne[1], e.up.ne[2],
        e.down.ne[0], e.down.ne[1], e.down.ne[2], d));
  }
  const int64_t pairs = x.rows() * top_k;
  if (top_k <= 0 || static_cast<int64_t>(ids.size()) != pairs ||
      static_cast<int64_t>(weights.size()) != pairs) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MoeExperts: ids/weights hold %d/%d entries, need rows %d x top_k %d",
                        ids.size(), weights.size(), x.rows(), top_k));
  }
  auto matrix = [](const WeightView& w) {
    kernels::ExpertMatrix m;
    m.type = w.type;
    m.data = w.data;
    m.row_bytes = w.row_bytes();
    m.expert_bytes = m.row_bytes * w.ne[1];
    return m;
  };
  kernels::MoeExpertsArgs a;
  a.x = x.f32();
  a.x_stride = x.stride_floats();
  a.rows = x.rows();
  a.n_embd = d;
  a.n_ff = ff;
  a.n_experts = n_exp;
  a.ids = ids.data();
  a.weights = weights.data();
  a.top_k = top_k;
  a.gate = matrix(e.gate);
  a.up = matrix(e.up);
  a.down = matrix(e.down);
  a.limit = e.limit;
  a.y = y.f32();
  a.y_stride = y.stride_floats();
  return a;
}

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_BACKEND_OP_CHECKS_H_
