// GGUF writer: metadata of every type, tensors padded to the alignment, optional split into
// shards by maximum size (A.9, the gguf-split scheme). Tensor bytes are produced on demand while
// writing so models far larger than memory can be written. Round-trips with GgufFile bit for bit.
#ifndef STEPSERVE_ENGINE_GGUF_GGUF_WRITER_H_
#define STEPSERVE_ENGINE_GGUF_GGUF_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf_value.h"
#include "engine/quant/ggml_type.h"

namespace stepserve::gguf {

struct WriteOptions {
  uint32_t alignment = 32;  // written as general.alignment when not 32
  // 0: one file. Otherwise start a new shard when the next tensor would push the shard's padded
  // tensor bytes over this many bytes (a shard always holds at least one tensor).
  uint64_t split_max_bytes = 0;
  uint32_t version = 3;
  // Leave the bytes of every tensor of at least kHoleMinBytes as a hole (reads as zeros, takes no
  // disk space on file systems with sparse files); smaller ones (norms, rope factors: what a
  // loader may validate) are written. For full-size speed benchmarks that fill the big weights
  // in device memory instead (`stepserve make-model --no-data`); such a file is not a usable
  // model on its own.
  bool tensor_data_holes = false;
  static constexpr uint64_t kHoleMinBytes = uint64_t{1} << 20;
};

class GgufWriter {
 public:
  // Fills exactly `nbytes` bytes of tensor data at `dst`.
  using FillFn = std::function<absl::Status(uint8_t* dst, uint64_t nbytes)>;
  // Progress: called after each tensor is written (tensors written, tensors total, bytes so far).
  using ProgressFn = std::function<void(size_t, size_t, uint64_t)>;

  explicit GgufWriter(WriteOptions options = {});

  Metadata& metadata() { return metadata_; }

  // `ne` has 1..4 entries, ne[0] fastest. Checks the name (unique, < 64 bytes) and that ne[0] is
  // a multiple of the type's block size.
  absl::Status AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne, FillFn fill);
  absl::Status AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                         std::string bytes);

  // Writes `path`. With split_max_bytes set and more than one shard needed, writes
  // PREFIX-00001-of-0000N.gguf ... where PREFIX is `path` without ".gguf"; shard 0 carries all
  // metadata, every shard the split.* keys. Returns the paths written, in shard order.
  absl::StatusOr<std::vector<std::string>> Write(const std::string& path,
                                                 const ProgressFn& progress = nullptr);

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t nbytes;
    FillFn fill;
  };
  WriteOptions options_;
  Metadata metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace stepserve::gguf

#endif  // STEPSERVE_ENGINE_GGUF_GGUF_WRITER_H_
