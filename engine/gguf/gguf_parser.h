// Private to engine/gguf: parses one GGUF file image (one shard) with every check of the spec's
// loader checklist (A.12). The reader assembles shards from these.
#ifndef STEPSERVE_ENGINE_GGUF_GGUF_PARSER_H_
#define STEPSERVE_ENGINE_GGUF_GGUF_PARSER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_value.h"

namespace stepserve::gguf::internal {

inline constexpr uint64_t kMaxStringLength = uint64_t{1} << 30;
inline constexpr uint64_t kMaxArrayElements = uint64_t{1} << 30;
// Nested arrays are legal in the written spec; deeper nesting than this is only seen in hostile
// files and would let one record drive unbounded recursion.
inline constexpr int kMaxArrayDepth = 8;
inline constexpr size_t kMaxTensorNameLength = 63;  // GGML_MAX_NAME - 1

struct ParsedShard {
  ShardInfo info;
  Metadata metadata;
  std::vector<TensorInfo> tensors;  // `data` points into `bytes`
};

// `name` is used in error messages. Tensor `shard` fields are set to `shard_index`.
absl::StatusOr<ParsedShard> ParseShard(std::string_view bytes, const std::string& name,
                                       int shard_index, const OpenOptions& options);

}  // namespace stepserve::gguf::internal

#endif  // STEPSERVE_ENGINE_GGUF_GGUF_PARSER_H_
