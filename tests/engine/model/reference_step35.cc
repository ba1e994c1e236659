#include "tests/engine/model/reference_step35.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "engine/quant/quant.h"

namespace stepserve::model::testing {
namespace {

std::string Blk(int il, const char* suffix) { return "blk." + std::to_string(il) + "." + suffix; }

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double Silu(double x) { return x * Sigmoid(x); }

}  // namespace

ReferenceStep35::ReferenceStep35(const gguf::GgufFile& file, const Hparams& hparams)
    : file_(file), hp_(hparams) {}

bool ReferenceStep35::Has(const std::string& name) const {
  return file_.FindTensor(name) != nullptr;
}

ReferenceStep35::Matrix ReferenceStep35::Load(const std::string& name, int64_t expert) const {
  const gguf::TensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) std::abort();
  Matrix m;
  m.in = t->ne[0];
  m.out = t->ne[1];
  m.w.resize(m.in * m.out);
  const int64_t row_bytes = RowBytes(t->type, m.in);
  const uint8_t* base = t->data + (expert < 0 ? 0 : expert * m.out * row_bytes);
  for (int64_t o = 0; o < m.out; ++o) {
    if (!quant::DequantizeRow(t->type, base + o * row_bytes, m.w.data() + o * m.in, m.in).ok()) {
      std::abort();
    }
  }
  return m;
}

std::vector<float> ReferenceStep35::LoadVector(const std::string& name) const {
  const gguf::TensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) std::abort();
  const float* data = reinterpret_cast<const float*>(t->data);
  return std::vector<float>(data, data + t->n_elements());
}

Vec ReferenceStep35::MatVec(const Matrix& m, const Vec& x) {
  Vec y(m.out, 0.0);
  for (int64_t o = 0; o < m.out; ++o) {
    double sum = 0;
    for (int64_t i = 0; i < m.in; ++i) sum += static_cast<double>(m.w[o * m.in + i]) * x[i];
    y[o] = sum;
  }
  return y;
}

Vec ReferenceStep35::RmsNorm(const Vec& x, const std::string& weight) const {
  const std::vector<float> gamma = LoadVector(weight);
  double mean_sq = 0;
  for (double v : x) mean_sq += v * v;
  mean_sq /= static_cast<double>(x.size());
  const double inv = 1.0 / std::sqrt(mean_sq + hp_.rms_eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * gamma[i];
  return y;
}

Vec ReferenceStep35::Embed(const std::string& table, int32_t token) const {
  const gguf::TensorInfo* t = file_.FindTensor(table);
  std::vector<float> row(t->ne[0]);
  const int64_t row_bytes = RowBytes(t->type, t->ne[0]);
  if (!quant::DequantizeRow(t->type, t->data + token * row_bytes, row.data(), t->ne[0]).ok()) {
    std::abort();
  }
  return Vec(row.begin(), row.end());
}

Vec ReferenceStep35::SwiGluFfn(const Matrix& gate, const Matrix& up, const Matrix& down,
                               double limit, const Vec& f) const {
  Vec g = MatVec(gate, f), u = MatVec(up, f), z(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (limit > 1e-6) {
      const double uc = std::clamp(u[i], -limit, limit);
      z[i] = std::min(Silu(g[i]), limit) * uc;
    } else {
      z[i] = Silu(g[i]) * u[i];
    }
  }
  return MatVec(down, z);
}

Vec ReferenceStep35::Ffn(int il, const Vec& f) const {
  const LayerHparams& l = hp_.layers[il];
  if (!Has(Blk(il, "ffn_gate_inp.weight"))) {
    return SwiGluFfn(Load(Blk(il, "ffn_gate.weight")), Load(Blk(il, "ffn_up.weight")),
                     Load(Blk(il, "ffn_down.weight")), l.clamp_shexp, f);
  }
  // Router (spec 4.6).
  const Vec logits = MatVec(Load(Blk(il, "ffn_gate_inp.weight")), f);
  const int64_t e = hp_.n_expert;
  Vec pi(e);
  if (hp_.gating == GatingFunc::kSoftmax) {
    const double max = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (int64_t i = 0; i < e; ++i) sum += (pi[i] = std::exp(logits[i] - max));
    for (double& p : pi) p /= sum;
  } else {
    for (int64_t i = 0; i < e; ++i) pi[i] = Sigmoid(logits[i]);
  }
  std::vector<float> bias(e, 0.0f);
  if (Has(Blk(il, "exp_probs_b.bias"))) bias = LoadVector(Blk(il, "exp_probs_b.bias"));
  std::vector<int64_t> order(e);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return pi[a] + bias[a] > pi[b] + bias[b]; });
  order.resize(hp_.n_expert_used);
  double total = 0;
  for (int64_t x : order) total += pi[x];
  Vec out(f.size(), 0.0);
  for (int64_t x : order) {
    double w = pi[x];
    if (hp_.expert_weights_norm) w /= std::max(total, 6.103515625e-5);
    if (hp_.expert_weights_scale != 0 && hp_.expert_weights_scale != 1) {
      w *= hp_.expert_weights_scale;
    }
    const Vec y =
        SwiGluFfn(Load(Blk(il, "ffn_gate_exps.weight"), x), Load(Blk(il, "ffn_up_exps.weight"), x),
                  Load(Blk(il, "ffn_down_exps.weight"), x), l.clamp_exp, f);
    for (size_t i = 0; i < f.size(); ++i) out[i] += w * y[i];
  }
  if (Has(Blk(il, "ffn_gate_shexp.weight"))) {
    const Vec s =
        SwiGluFfn(Load(Blk(il, "ffn_gate_shexp.weight")), Load(Blk(il, "ffn_up_shexp.weight")),
                  Load(Blk(il, "ffn_down_shexp.weight")), l.clamp_shexp, f);
    for (size_t i = 0; i < f.size(); ++i) out[i] += s[i];
  }
  return out;
}

std::vector<Vec> ReferenceStep35::Layer(int il, const std::vector<Vec>& h) const {
  const LayerHparams& l = hp_.layers[il];
  const int64_t n = static_cast<int64_t>(h.size());
  const int dk = l.head_dim_k, dv = l.head_dim_v;
  const Matrix wq = Load(Blk(il, "attn_q.weight")), wk = Load(Blk(il, "attn_k.weight")),
               wv = Load(Blk(il, "attn_v.weight")), wo = Load(Blk(il, "attn_output.weight"));
  const bool has_gate = Has(Blk(il, "attn_gate.weight"));
  Matrix wg;
  if (has_gate) wg = Load(Blk(il, "attn_gate.weight"));
  std::vector<float> ff;
  if (l.use_rope_freqs && Has("rope_freqs.weight")) ff = LoadVector("rope_freqs.weight");
  const std::vector<float> gq = LoadVector(Blk(il, "attn_q_norm.weight"));
  const std::vector<float> gk = LoadVector(Blk(il, "attn_k_norm.weight"));

  auto head_norm = [&](Vec& x, int heads, const std::vector<float>& gamma) {
    for (int hd = 0; hd < heads; ++hd) {
      double ms = 0;
      for (int i = 0; i < dk; ++i) ms += x[hd * dk + i] * x[hd * dk + i];
      const double inv = 1.0 / std::sqrt(ms / dk + hp_.rms_eps);
      for (int i = 0; i < dk; ++i) x[hd * dk + i] *= inv * gamma[i];
    }
  };
  auto rope = [&](Vec& x, int heads, int64_t p) {
    const int nr = l.n_rot;
    for (int hd = 0; hd < heads; ++hd) {
      double* v = x.data() + hd * dk;
      for (int j = 0; j < nr / 2; ++j) {
        double phi = p * std::pow(static_cast<double>(l.rope_base), -2.0 * j / nr);
        if (!ff.empty()) phi /= ff[j];
        const double a = v[j], b = v[j + nr / 2];
        v[j] = a * std::cos(phi) - b * std::sin(phi);
        v[j + nr / 2] = a * std::sin(phi) + b * std::cos(phi);
      }
    }
  };

  std::vector<Vec> a(n), q(n), k(n), v(n), gate(n);
  for (int64_t t = 0; t < n; ++t) {
    a[t] = RmsNorm(h[t], Blk(il, "attn_norm.weight"));
    q[t] = MatVec(wq, a[t]);
    k[t] = MatVec(wk, a[t]);
    v[t] = MatVec(wv, a[t]);
    head_norm(q[t], l.n_head, gq);
    head_norm(k[t], l.n_head_kv, gk);
    rope(q[t], l.n_head, t);
    rope(k[t], l.n_head_kv, t);
    if (has_gate) gate[t] = MatVec(wg, a[t]);
  }
  std::vector<Vec> out(n);
  const int group = l.n_head / l.n_head_kv;
  for (int64_t t = 0; t < n; ++t) {
    Vec o(static_cast<size_t>(l.n_head) * dv, 0.0);
    const int64_t first = l.is_swa ? std::max<int64_t>(0, t - hp_.sliding_window + 1) : 0;
    for (int hd = 0; hd < l.n_head; ++hd) {
      const int g = hd / group;
      std::vector<double> s;
      for (int64_t p = first; p <= t; ++p) {
        double dot = 0;
        for (int i = 0; i < dk; ++i) dot += q[t][hd * dk + i] * k[p][g * dk + i];
        s.push_back(dot / std::sqrt(static_cast<double>(dk)));
      }
      const double max = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - max));
      for (int64_t p = first; p <= t; ++p) {
        for (int i = 0; i < dv; ++i) o[hd * dv + i] += s[p - first] / sum * v[p][g * dv + i];
      }
      if (has_gate) {
        for (int i = 0; i < dv; ++i) o[hd * dv + i] *= Sigmoid(gate[t][hd]);
      }
    }
    Vec h1 = MatVec(wo, o);
    for (size_t i = 0; i < h1.size(); ++i) h1[i] += h[t][i];
    const Vec f = RmsNorm(h1, Blk(il, "ffn_norm.weight"));
    const Vec y = Ffn(il, f);
    for (size_t i = 0; i < h1.size(); ++i) h1[i] += y[i];
    out[t] = std::move(h1);
  }
  return out;
}

void ReferenceStep35::Run(const std::vector<int32_t>& tokens, std::vector<Vec>* logits,
                          std::vector<Vec>* hidden) const {
  std::vector<Vec> h;
  for (int32_t token : tokens) h.push_back(Embed("token_embd.weight", token));
  for (int il = 0; il < hp_.n_layer; ++il) h = Layer(il, h);
  *hidden = h;
  const Matrix out = Load("output.weight");
  logits->clear();
  for (const Vec& x : h) logits->push_back(MatVec(out, RmsNorm(x, "output_norm.weight")));
}

void ReferenceStep35::RunMtp(int head, const std::vector<int32_t>& tokens,
                             const std::vector<Vec>& hidden_in, std::vector<Vec>* logits,
                             std::vector<Vec>* hidden) const {
  const int il = hp_.n_layer + head;
  const std::string table = Has(Blk(il, "nextn.embed_tokens.weight"))
                                ? Blk(il, "nextn.embed_tokens.weight")
                                : std::string("token_embd.weight");
  const Matrix eh = Load(Blk(il, "nextn.eh_proj.weight"));
  std::vector<Vec> u;
  for (size_t t = 0; t < tokens.size(); ++t) {
    Vec cat = RmsNorm(Embed(table, tokens[t]), Blk(il, "nextn.enorm.weight"));
    const Vec g = RmsNorm(hidden_in[t], Blk(il, "nextn.hnorm.weight"));
    cat.insert(cat.end(), g.begin(), g.end());
    u.push_back(MatVec(eh, cat));
  }
  *hidden = Layer(il, u);
  const std::string norm = Has(Blk(il, "nextn.shared_head_norm.weight"))
                               ? Blk(il, "nextn.shared_head_norm.weight")
                               : std::string("output_norm.weight");
  const Matrix head_w =
      Load(Has(Blk(il, "nextn.shared_head_head.weight")) ? Blk(il, "nextn.shared_head_head.weight")
                                                         : std::string("output.weight"));
  logits->clear();
  for (const Vec& x : *hidden) logits->push_back(MatVec(head_w, RmsNorm(x, norm)));
}

}  // namespace stepserve::model::testing
