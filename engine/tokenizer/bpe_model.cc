#include "engine/tokenizer/bpe_model.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/byte_unicode.h"

namespace stepserve::tokenizer {
namespace {

struct Symbol {
  int32_t id;  // -1 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Candidate {
  int32_t rank;
  int32_t left;  // symbol positions
  int32_t right;
  int32_t left_id;  // ids when queued; a mismatch later means the candidate is stale
  int32_t right_id;
  int32_t result;
};

// std heap functions build a max-heap; "greater" puts the lowest rank, then leftmost, on top.
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

// Per-thread scratch so that encoding allocates nothing per piece once warmed up.
struct Scratch {
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::Build(const Vocabulary& vocab) {
  BpeModel model;
  std::string text;
  for (int byte = 0; byte < 256; ++byte) {
    text.clear();
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(byte)), &text);
    std::optional<int32_t> id = vocab.Find(text);
    if (!id) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokenizer.ggml.tokens: no token for byte 0x%02X (byte-level text \"%s\"); a byte-level "
          "BPE vocabulary needs all 256",
          byte, text));
    }
    model.byte_token_[byte] = *id;
  }
  const std::vector<MergeRule>& merges = vocab.merges();
  model.rules_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    // A repeated pair keeps its first (best) rank.
    model.rules_.try_emplace(PairKey(merges[rank].left, merges[rank].right),
                             Rule{static_cast<int32_t>(rank), merges[rank].result});
  }
  return model;
}

void BpeModel::EncodePiece(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out->push_back(byte_token_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  Scratch& scratch = ThreadScratch();
  std::vector<Symbol>& symbols = scratch.symbols;
  std::vector<Candidate>& heap = scratch.heap;
  const auto n = static_cast<int32_t>(piece.size());
  symbols.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_token_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  auto try_queue = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = rules_.find(PairKey(symbols[left].id, symbols[right].id));
    if (it == rules_.end()) return;
    heap.push_back(
        {it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.result});
    std::push_heap(heap.begin(), heap.end(), CandidateAfter());
  };
  for (int32_t i = 0; i + 1 < n; ++i) try_queue(i, i + 1);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), CandidateAfter());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (left.id != c.left_id || right.id != c.right_id || left.next != c.right) continue;
    left.id = c.result;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;
    try_queue(left.prev, c.left);
    try_queue(c.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

}  // namespace stepserve::tokenizer
