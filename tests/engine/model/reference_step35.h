// A plain, independent evaluation of the step35 equations (spec sections 4 and 5.2) for tests:
// dense full recompute in double precision, weights dequantized with the reference block
// decoders, no paging, no batching, no kernels. Slow and obviously correct is the point.
#ifndef STEPSERVE_TESTS_ENGINE_MODEL_REFERENCE_STEP35_H_
#define STEPSERVE_TESTS_ENGINE_MODEL_REFERENCE_STEP35_H_

#include <cstdint>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/model/hparams.h"

namespace stepserve::model::testing {

using Vec = std::vector<double>;

class ReferenceStep35 {
 public:
  ReferenceStep35(const gguf::GgufFile& file, const Hparams& hparams);

  // Trunk over tokens at positions 0..T-1: logits of every row and the pre-norm final hidden
  // states h_final (the MTP input).
  void Run(const std::vector<int32_t>& tokens, std::vector<Vec>* logits,
           std::vector<Vec>* hidden) const;

  // MTP head `head` over rows t = 0..T-1 at positions 0..T-1, row t pairing token tokens[t]
  // with hidden_in[t] (spec 5.2); logits and output hidden vectors of every row.
  void RunMtp(int head, const std::vector<int32_t>& tokens, const std::vector<Vec>& hidden_in,
              std::vector<Vec>* logits, std::vector<Vec>* hidden) const;

 private:
  struct Matrix {
    int64_t in = 0, out = 0;
    std::vector<float> w;  // out rows of in
  };
  Matrix Load(const std::string& name, int64_t expert = -1) const;
  bool Has(const std::string& name) const;
  std::vector<float> LoadVector(const std::string& name) const;
  static Vec MatVec(const Matrix& m, const Vec& x);
  Vec RmsNorm(const Vec& x, const std::string& weight) const;
  Vec Embed(const std::string& table, int32_t token) const;
  // One decoder layer over all rows (causal attention within the layer's window).
  std::vector<Vec> Layer(int il, const std::vector<Vec>& h) const;
  Vec Ffn(int il, const Vec& f) const;
  Vec SwiGluFfn(const Matrix& gate, const Matrix& up, const Matrix& down, double limit,
                const Vec& f) const;

  const gguf::GgufFile& file_;
  const Hparams& hp_;
};

}  // namespace stepserve::model::testing

#endif  // STEPSERVE_TESTS_ENGINE_MODEL_REFERENCE_STEP35_H_
