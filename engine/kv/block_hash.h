// Content hashes of KV blocks for the prefix cache: a block's hash chains its parent's hash with
// its own token ids, so equal hashes mean (barring collisions, which BlockPool::Find rules out by
// comparing content) equal token prefixes up to the end of the block.
#ifndef STEPSERVE_ENGINE_KV_BLOCK_HASH_H_
#define STEPSERVE_ENGINE_KV_BLOCK_HASH_H_

#include <cstdint>
#include <span>

namespace stepserve::kv {

// The parent hash of a sequence's first block.
inline constexpr uint64_t kRootBlockHash = 0x6a09e667f3bcc909ULL;

// Hash of the block holding `tokens` whose preceding block hashed to `parent_hash`.
uint64_t ChainBlockHash(uint64_t parent_hash, std::span<const int32_t> tokens);

}  // namespace stepserve::kv

#endif  // STEPSERVE_ENGINE_KV_BLOCK_HASH_H_
