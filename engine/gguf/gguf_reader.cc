#include "engine/gguf/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/base/absl_compat.h"
#include "engine/gguf/gguf_parser.h"

namespace stepserve::gguf {

// A read-only private mapping of one shard file.
struct GgufFile::Mapping {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data != nullptr && size > 0) munmap(const_cast<uint8_t*>(data), size);
  }
  std::string_view bytes() const {
    return std::string_view(reinterpret_cast<const char*>(data), size);
  }
};

namespace {

constexpr std::string_view kSplitNo = "split.no";
constexpr std::string_view kSplitCount = "split.count";
constexpr std::string_view kSplitTensorsCount = "split.tensors.count";

struct SplitKeys {
  bool present = false;
  int64_t no = 0;
  int64_t count = 1;
  int64_t tensors_count = 0;
};

// Reads and range-checks the split.* keys of one shard. Any integer type is accepted (the
// producers write UINT16/UINT16/INT32).
absl::StatusOr<SplitKeys> ReadSplitKeys(const Metadata& md, const std::string& path) {
  SplitKeys keys;
  if (!md.Contains(kSplitCount)) {
    for (std::string_view k : {kSplitNo, kSplitTensorsCount}) {
      if (md.Contains(k)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: key '%s' is present but '%s' is not", path, k, kSplitCount));
      }
    }
    return keys;
  }
  keys.present = true;
  for (auto [k, out] : {std::pair{kSplitNo, &keys.no}, std::pair{kSplitCount, &keys.count},
                        std::pair{kSplitTensorsCount, &keys.tensors_count}}) {
    absl::StatusOr<int64_t> v = md.GetInt(k);
    if (!v.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %s", path, v.status().message()));
    }
    *out = *v;
  }
  if (keys.count < 1 || keys.count > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: key 'split.count' = %d is outside [1, 65535]", path, keys.count));
  }
  if (keys.no < 0 || keys.no >= keys.count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: key 'split.no' = %d is outside [0, split.count = %d)", path, keys.no, keys.count));
  }
  if (keys.tensors_count < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: key 'split.tensors.count' = %d is negative", path, keys.tensors_count));
  }
  return keys;
}

absl::Status ErrnoError(std::string_view what, const std::string& path) {
  int err = errno;
  std::string message = absl::StrFormat("%s: %s: %s", path, what, std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  return absl::UnavailableError(message);
}

}  // namespace

// Builds GgufFile objects from parsed shards (a friend of GgufFile).
class GgufParser {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile::Mapping>> Map(const std::string& path);
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                        const OpenOptions& options);
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBuffer(std::string_view bytes,
                                                              std::string name,
                                                              const OpenOptions& options);

 private:
  static absl::Status AddShard(GgufFile& file, internal::ParsedShard shard);
};

absl::StatusOr<std::unique_ptr<GgufFile::Mapping>> GgufParser::Map(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    absl::Status s = ErrnoError("cannot stat", path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrFormat("%s: not a regular file", path));
  }
  auto mapping = std::make_unique<GgufFile::Mapping>();
  mapping->size = static_cast<uint64_t>(st.st_size);
  if (mapping->size > 0) {
    void* p = mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      absl::Status s = ErrnoError("cannot mmap", path);
      ::close(fd);
      return s;
    }
    mapping->data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid
  return mapping;
}

absl::Status GgufParser::AddShard(GgufFile& file, internal::ParsedShard shard) {
  const std::string& path = shard.info.path;
  file.tensors_.reserve(file.tensors_.size() + shard.tensors.size());
  for (TensorInfo& t : shard.tensors) {
    auto [it, inserted] = file.tensor_index_.emplace(t.name, file.tensors_.size());
    if (!inserted) {
      const TensorInfo& first = file.tensors_[it->second];
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: tensor '%s' at offset %d is also in shard %d (%s); the shards are not one set", path,
          t.name, t.file_offset, first.shard, file.shards_[first.shard].path));
    }
    file.tensors_.push_back(std::move(t));
  }
  if (file.shards_.empty()) file.metadata_ = std::move(shard.metadata);
  file.shards_.push_back(std::move(shard.info));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufParser::FromBuffer(std::string_view bytes,
                                                                 std::string name,
                                                                 const OpenOptions& options) {
  absl::StatusOr<internal::ParsedShard> shard = internal::ParseShard(bytes, name, 0, options);
  if (!shard.ok()) return shard.status();
  absl::StatusOr<SplitKeys> keys = ReadSplitKeys(shard->metadata, name);
  if (!keys.ok()) return keys.status();
  if (keys->present && keys->count == 1 && keys->tensors_count != shard->info.n_tensors) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: key 'split.tensors.count' = %d but the file has %d tensors", name,
                        keys->tensors_count, shard->info.n_tensors));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  if (absl::Status s = AddShard(*file, *std::move(shard)); !s.ok()) return s;
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufParser::Open(const std::string& path,
                                                           const OpenOptions& options) {
  absl::StatusOr<std::unique_ptr<GgufFile::Mapping>> first_map = Map(path);
  if (!first_map.ok()) return first_map.status();
  absl::StatusOr<internal::ParsedShard> first =
      internal::ParseShard((*first_map)->bytes(), path, 0, options);
  if (!first.ok()) return first.status();
  absl::StatusOr<SplitKeys> keys = ReadSplitKeys(first->metadata, path);
  if (!keys.ok()) return keys.status();

  std::unique_ptr<GgufFile> file(new GgufFile());
  if (!keys->present || keys->count == 1 || !options.load_split) {
    if (keys->present && keys->count == 1 && keys->tensors_count != first->info.n_tensors) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: key 'split.tensors.count' = %d but the file has %d tensors", path,
                          keys->tensors_count, first->info.n_tensors));
    }
    if (absl::Status s = AddShard(*file, *std::move(first)); !s.ok()) return s;
    file->mappings_.push_back(*std::move(first_map));
    return file;
  }

  // A split set: derive the prefix from this shard's own name (A.9), then load every shard.
  const int count = static_cast<int>(keys->count);
  const int given = static_cast<int>(keys->no);
  std::string suffix = absl::StrFormat("-%05d-of-%05d.gguf", given + 1, count);
  if (path.size() < suffix.size() ||
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: shard %d of a %d-shard set, but the file name does not end with '%s', so the "
        "sibling shards cannot be found",
        path, given, count, suffix));
  }
  std::string prefix = path.substr(0, path.size() - suffix.size());
  int64_t total_tensors = 0;
  for (int i = 0; i < count; ++i) {
    std::unique_ptr<GgufFile::Mapping> map;
    internal::ParsedShard shard;
    if (i == given) {
      map = *std::move(first_map);
      shard = *std::move(first);
      shard.info.path = path;
    } else {
      std::string shard_path = SplitShardPath(prefix, i, count);
      absl::StatusOr<std::unique_ptr<GgufFile::Mapping>> m = Map(shard_path);
      if (!m.ok()) {
        return absl::Status(m.status().code(),
                            absl::StrFormat("missing shard %d of %d of the set opened from %s: %s",
                                            i + 1, count, path, m.status().message()));
      }
      absl::StatusOr<internal::ParsedShard> parsed =
          internal::ParseShard((*m)->bytes(), shard_path, i, options);
      if (!parsed.ok()) return parsed.status();
      absl::StatusOr<SplitKeys> k = ReadSplitKeys(parsed->metadata, shard_path);
      if (!k.ok()) return k.status();
      if (!k->present || k->count != count || k->no != i ||
          k->tensors_count != keys->tensors_count) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: shard is not part of the set of %s: it has split.no = %d, split.count = %d, "
            "split.tensors.count = %d; expected %d, %d, %d",
            shard_path, path, k->no, k->count, k->tensors_count, i, count, keys->tensors_count));
      }
      map = *std::move(m);
      shard = *std::move(parsed);
    }
    for (TensorInfo& t : shard.tensors) t.shard = i;
    total_tensors += shard.info.n_tensors;
    if (absl::Status s = AddShard(*file, std::move(shard)); !s.ok()) return s;
    file->mappings_.push_back(std::move(map));
  }
  if (total_tensors != keys->tensors_count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: key 'split.tensors.count' = %d but the %d shards hold %d tensors",
                        path, keys->tensors_count, count, total_tensors));
  }
  return file;
}

GgufFile::GgufFile() = default;
GgufFile::~GgufFile() = default;

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path,
                                                         const OpenOptions& options) {
  return GgufParser::Open(path, options);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(std::string_view bytes,
                                                               std::string name,
                                                               const OpenOptions& options) {
  return GgufParser::FromBuffer(bytes, std::move(name), options);
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(AbslView(name));
  if (it == tensor_index_.end()) return nullptr;
  return &tensors_[it->second];
}

std::string GgufFile::architecture() const {
  const Value* v = metadata_.Find("general.architecture");
  if (v == nullptr || v->AsString() == nullptr) return "";
  return *v->AsString();
}

uint64_t GgufFile::total_tensor_bytes() const {
  uint64_t total = 0;
  for (const TensorInfo& t : tensors_) total += t.nbytes;
  return total;
}

std::string TensorInfo::ShapeString() const {
  std::string out = "[";
  uint32_t n = n_dims < 4 ? n_dims : 4;
  for (uint32_t d = 0; d < n; ++d) {
    if (d > 0) out += ", ";
    out += std::to_string(ne[d]);
  }
  out += "]";
  return out;
}

std::string SplitShardPath(std::string_view prefix, int index, int count) {
  return absl::StrFormat("%s-%05d-of-%05d.gguf", prefix, index + 1, count);
}

}  // namespace stepserve::gguf
