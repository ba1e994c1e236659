// Memory-mapped GGUF reader with split-shard support and full validation before use
// (spec: shared/spec/gguf-and-quants.md, Part A). Never reads outside the file on any input;
// every error names the file, the byte offset and the key or tensor concerned.
#ifndef STEPSERVE_ENGINE_GGUF_GGUF_READER_H_
#define STEPSERVE_ENGINE_GGUF_GGUF_READER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf_value.h"
#include "engine/quant/ggml_type.h"

namespace stepserve::gguf {

inline constexpr uint32_t kDefaultAlignment = 32;

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  uint32_t n_dims = 1;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};  // ne[0] fastest; missing dimensions are 1
  uint64_t offset = 0;       // relative to the data section of its shard
  uint64_t nbytes = 0;       // unpadded
  int shard = 0;             // index into GgufFile::shards()
  uint64_t file_offset = 0;  // absolute offset of the first byte in the shard file
  const uint8_t* data = nullptr;  // inside the mapping; valid while the GgufFile lives

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string ShapeString() const;  // "[4096, 1280, 288]" (n_dims entries)
};

struct ShardInfo {
  std::string path;
  uint32_t version = 3;
  uint64_t file_size = 0;
  uint32_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;
  int64_t n_tensors = 0;
  int64_t n_kv = 0;
};

struct OpenOptions {
  // Also require the reference reader's back-to-back tensor layout (A.7).
  bool strict_layout = false;
  // Look for and load the sibling shards of a split set.
  bool load_split = true;
};

class GgufFile {
 public:
  // Opens a file; for a split set, `path` may be any shard and the siblings are found beside it
  // (A.9), checked (split.no, split.count, split.tensors.count) and merged into one tensor table.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                        const OpenOptions& options = {});
  // Parses one in-memory file image (no siblings). `bytes` must outlive the result. `name` is used
  // in error messages in place of a path.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBuffer(std::string_view bytes,
                                                              std::string name,
                                                              const OpenOptions& options = {});

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  // Metadata of shard 0 (the model's metadata; other shards carry only split.* keys).
  const Metadata& metadata() const { return metadata_; }
  // Tensors of all shards in file order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const;
  const std::vector<ShardInfo>& shards() const { return shards_; }
  // general.architecture, or "" when absent.
  std::string architecture() const;
  uint64_t total_tensor_bytes() const;

 private:
  struct Mapping;
  GgufFile();

  Metadata metadata_;
  std::vector<TensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
  std::vector<ShardInfo> shards_;
  std::vector<std::unique_ptr<Mapping>> mappings_;
  friend class GgufParser;
};

// Path of shard `index` (0-based) of a split set: "PREFIX-%05d-of-%05d.gguf".
std::string SplitShardPath(std::string_view prefix, int index, int count);

}  // namespace stepserve::gguf

#endif  // STEPSERVE_ENGINE_GGUF_GGUF_READER_H_
