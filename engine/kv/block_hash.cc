#include "engine/kv/block_hash.h"

namespace stepserve::kv {
namespace {

// A bijective 64-bit finalizer with full avalanche (every input bit flips each output bit with
// probability ~1/2): xor-shift / multiply rounds with odd constants.
uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t ChainBlockHash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  // Absorb one word at a time; the golden-ratio increment keeps runs of zeros from cancelling,
  // and the length goes in last so blocks of different sizes never share a state.
  uint64_t state = Mix64(parent_hash ^ 0x3c6ef372fe94f82bULL);
  for (int32_t token : tokens) {
    state = Mix64(state + 0x9e3779b97f4a7c15ULL + static_cast<uint32_t>(token));
  }
  return Mix64(state ^ static_cast<uint64_t>(tokens.size()));
}

}  // namespace stepserve::kv
