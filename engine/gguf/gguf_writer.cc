#include "engine/gguf/gguf_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/base/absl_compat.h"
#include "engine/gguf/gguf_parser.h"

namespace stepserve::gguf {
namespace {

constexpr std::string_view kSplitNo = "split.no";
constexpr std::string_view kSplitCount = "split.count";
constexpr std::string_view kSplitTensorsCount = "split.tensors.count";

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

template <typename T>
void Put(std::string* out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out->append(buf, sizeof(T));
}

void PutString(std::string* out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  out->append(s.data(), s.size());
}

absl::Status EncodeValue(const Value& value, std::string_view key, int depth, std::string* out);

// Elements are written without type tags, so each must really have the array's element type.
absl::Status EncodeArray(const Array& array, std::string_view key, int depth, std::string* out) {
  if (depth >= internal::kMaxArrayDepth) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "metadata key '%s': arrays nested deeper than %d levels", key, internal::kMaxArrayDepth));
  }
  if (array.elems.size() > internal::kMaxArrayElements) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "metadata key '%s': %d array elements exceed the 2^30 limit", key, array.elems.size()));
  }
  Put<int32_t>(out, static_cast<int32_t>(array.elem_type));
  Put<uint64_t>(out, array.elems.size());
  for (size_t i = 0; i < array.elems.size(); ++i) {
    const Value& elem = array.elems[i];
    if (elem.type() != array.elem_type) {
      return absl::InvalidArgumentError(
          absl::StrFormat("metadata key '%s': element %d has type %s in an array of %s", key, i,
                          ValueTypeName(elem.type()), ValueTypeName(array.elem_type)));
    }
    if (absl::Status s = EncodeValue(elem, key, depth + 1, out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Encodes the payload only (no type tag).
absl::Status EncodeValue(const Value& value, std::string_view key, int depth, std::string* out) {
  return std::visit(
      [&](const auto& v) -> absl::Status {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (v.size() > internal::kMaxStringLength) {
            return absl::InvalidArgumentError(absl::StrFormat(
                "metadata key '%s': string of %d bytes exceeds the 2^30 limit", key, v.size()));
          }
          PutString(out, v);
        } else if constexpr (std::is_same_v<T, Array>) {
          return EncodeArray(v, key, depth, out);
        } else if constexpr (std::is_same_v<T, bool>) {
          Put<uint8_t>(out, v ? 1 : 0);
        } else {
          Put<T>(out, v);
        }
        return absl::OkStatus();
      },
      value.storage());
}

absl::Status EncodeMetadata(const Metadata& md, std::string* out) {
  for (const auto& [key, value] : md.entries()) {
    if (key.empty()) return absl::InvalidArgumentError("metadata has an empty key");
    if (key.size() > internal::kMaxStringLength) {
      return absl::InvalidArgumentError("metadata key longer than 2^30 bytes");
    }
    PutString(out, key);
    Put<int32_t>(out, static_cast<int32_t>(value.type()));
    if (absl::Status s = EncodeValue(value, key, 0, out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// A file being written under a temporary name; removed unless committed.
class TempFile {
 public:
  explicit TempFile(std::string final_path) : final_path_(std::move(final_path)) {}
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
  }

  absl::Status Create() {
    std::string pattern = final_path_ + ".tmp.XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    fd_ = mkstemp(buf.data());
    if (fd_ < 0) return Errno("cannot create a temporary file for");
    temp_path_ = buf.data();
    ::fchmod(fd_, 0644);
    return absl::OkStatus();
  }

  absl::Status Write(const void* data, uint64_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      size_t chunk = n > (uint64_t{1} << 30) ? (size_t{1} << 30) : static_cast<size_t>(n);
      ssize_t w = ::write(fd_, p, chunk);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Errno("write failed for");
      }
      p += w;
      n -= static_cast<uint64_t>(w);
    }
    return absl::OkStatus();
  }

  // Advances the file position by `n` bytes without writing them (a hole once the size is set).
  absl::Status Skip(uint64_t n) {
    if (n == 0) return absl::OkStatus();
    if (::lseek(fd_, static_cast<off_t>(n), SEEK_CUR) < 0) return Errno("seek failed for");
    return absl::OkStatus();
  }

  // Sets the size to the current position (a trailing hole has no bytes written after it).
  absl::Status TruncateHere() {
    const off_t end = ::lseek(fd_, 0, SEEK_CUR);
    if (end < 0 || ::ftruncate(fd_, end) != 0) return Errno("cannot set the size of");
    return absl::OkStatus();
  }

  absl::Status Close() {
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return Errno("close failed for");
    return absl::OkStatus();
  }

  absl::Status Commit() {
    if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
      return Errno("cannot rename the temporary file to");
    }
    committed_ = true;
    return absl::OkStatus();
  }

 private:
  absl::Status Errno(std::string_view what) const {
    return absl::UnavailableError(
        absl::StrFormat("%s %s: %s", what, final_path_, std::strerror(errno)));
  }

  std::string final_path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

GgufWriter::GgufWriter(WriteOptions options) : options_(options) {}

absl::Status GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                                   FillFn fill) {
  if (name.size() > internal::kMaxTensorNameLength) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s': name is %d bytes; the limit is %d", name, name.size(),
                        internal::kMaxTensorNameLength));
  }
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) {
      return absl::AlreadyExistsError(absl::StrFormat("tensor '%s' was already added", name));
    }
  }
  if (ne.empty() || ne.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s': %d dimensions; 1 to 4 are allowed", name, ne.size()));
  }
  if (!LookupGgmlType(static_cast<int32_t>(type)).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s': unknown type id %d", name, static_cast<int32_t>(type)));
  }
  const GgmlTypeInfo& info = TypeInfo(type);
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor '%s': ne[%d] is negative (%d)", name, d, ne[d]));
    }
  }
  int64_t bytes = RowBytes(type, ne[0]);
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s': ne[0] = %d is not a multiple of the %s block size %d", name,
                        ne[0], info.name, info.block_elems));
  }
  int64_t elems = ne[0];
  for (size_t d = 1; d < ne.size(); ++d) {
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    if (ne[d] != 0 && (bytes > kMax / ne[d] || elems > kMax / ne[d])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor '%s': shape overflows 64-bit sizes", name));
    }
    bytes *= ne[d];
    elems *= ne[d];
  }
  if (!fill) {
    return absl::InvalidArgumentError(absl::StrFormat("tensor '%s': no fill function", name));
  }
  tensors_.push_back(PendingTensor{std::move(name), type, std::move(ne),
                                   static_cast<uint64_t>(bytes), std::move(fill)});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                                   std::string bytes) {
  auto shared = std::make_shared<const std::string>(std::move(bytes));
  std::string tensor_name = name;
  absl::Status s = AddTensor(std::move(name), type, std::move(ne),
                             [shared, tensor_name](uint8_t* dst, uint64_t nbytes) -> absl::Status {
                               if (nbytes != shared->size()) {
                                 return absl::InvalidArgumentError(absl::StrFormat(
                                     "tensor '%s': %d bytes given, its shape needs %d", tensor_name,
                                     shared->size(), nbytes));
                               }
                               std::memcpy(dst, shared->data(), nbytes);
                               return absl::OkStatus();
                             });
  if (s.ok() && tensors_.back().nbytes != shared->size()) {
    uint64_t need = tensors_.back().nbytes;
    tensors_.pop_back();
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor '%s': %d bytes given, its shape needs %d", tensor_name, shared->size(), need));
  }
  return s;
}

absl::StatusOr<std::vector<std::string>> GgufWriter::Write(const std::string& path,
                                                           const ProgressFn& progress) {
  const uint32_t alignment = options_.alignment;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: alignment %d is not a nonzero power of two", path, alignment));
  }
  if (options_.version != 2 && options_.version != 3) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot write GGUF version %d (2 or 3)", path, options_.version));
  }
  if (const Value* a = metadata_.Find("general.alignment")) {
    const uint32_t* v = std::get_if<uint32_t>(&a->storage());
    if (v == nullptr || *v != alignment) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: metadata 'general.alignment' = %s disagrees with the writer's alignment %d (u32)",
          path, a->ToString(), alignment));
    }
  }

  // Plan the shards: consecutive runs of tensors, a new shard when the next tensor would push
  // the shard's padded bytes over the limit (gguf-split's rule).
  std::vector<size_t> shard_begin = {0};
  if (options_.split_max_bytes > 0) {
    uint64_t running = 0;
    size_t in_shard = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      uint64_t padded = AlignUp(tensors_[i].nbytes, alignment);
      if (in_shard > 0 && running + padded > options_.split_max_bytes) {
        shard_begin.push_back(i);
        running = 0;
        in_shard = 0;
      }
      running += padded;
      ++in_shard;
    }
  }
  const size_t n_shards = shard_begin.size();
  if (n_shards > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the split needs %d shards; split.count is 16-bit", path, n_shards));
  }
  shard_begin.push_back(tensors_.size());

  std::vector<std::string> paths;
  if (n_shards == 1) {
    paths.push_back(path);
  } else {
    std::string prefix = path;
    if (prefix.size() >= 5 && prefix.compare(prefix.size() - 5, 5, ".gguf") == 0) {
      prefix.resize(prefix.size() - 5);
    }
    for (size_t i = 0; i < n_shards; ++i) {
      paths.push_back(SplitShardPath(prefix, static_cast<int>(i), static_cast<int>(n_shards)));
    }
  }

  uint64_t max_tensor = 0;
  for (const PendingTensor& t : tensors_) max_tensor = std::max(max_tensor, t.nbytes);
  // One tensor at a time is produced and written, so memory stays at the largest tensor.
  std::vector<uint8_t> buffer;
  const std::vector<uint8_t> zeros(alignment, 0);

  std::vector<std::unique_ptr<TempFile>> files;
  size_t written = 0;
  uint64_t bytes_so_far = 0;
  for (size_t s = 0; s < n_shards; ++s) {
    Metadata md;
    if (s == 0) md = metadata_;
    md.Erase(kSplitNo);
    md.Erase(kSplitCount);
    md.Erase(kSplitTensorsCount);
    if (alignment != kDefaultAlignment && !md.Contains("general.alignment")) {
      md.Set("general.alignment", Value(Value::Storage(std::in_place_type<uint32_t>, alignment)));
    }
    if (n_shards > 1) {
      md.Set(std::string(kSplitNo),
             Value(Value::Storage(std::in_place_type<uint16_t>, static_cast<uint16_t>(s))));
      md.Set(std::string(kSplitCount),
             Value(Value::Storage(std::in_place_type<uint16_t>, static_cast<uint16_t>(n_shards))));
      md.Set(std::string(kSplitTensorsCount),
             Value(Value::Storage(std::in_place_type<int32_t>,
                                  static_cast<int32_t>(tensors_.size()))));
    }

    std::string head;
    head.append("GGUF", 4);
    Put<uint32_t>(&head, options_.version);
    Put<int64_t>(&head, static_cast<int64_t>(shard_begin[s + 1] - shard_begin[s]));
    Put<int64_t>(&head, static_cast<int64_t>(md.size()));
    if (absl::Status st = EncodeMetadata(md, &head); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %s", path, st.message()));
    }
    uint64_t offset = 0;
    for (size_t i = shard_begin[s]; i < shard_begin[s + 1]; ++i) {
      const PendingTensor& t = tensors_[i];
      PutString(&head, t.name);
      Put<uint32_t>(&head, static_cast<uint32_t>(t.ne.size()));
      for (int64_t n : t.ne) Put<int64_t>(&head, n);
      Put<int32_t>(&head, static_cast<int32_t>(t.type));
      Put<uint64_t>(&head, offset);
      offset += AlignUp(t.nbytes, alignment);
    }
    // The reference writer pads the header even when the shard has no tensors.
    head.resize(AlignUp(head.size(), alignment), '\0');

    auto file = std::make_unique<TempFile>(paths[s]);
    if (absl::Status st = file->Create(); !st.ok()) return st;
    if (absl::Status st = file->Write(head.data(), head.size()); !st.ok()) return st;
    for (size_t i = shard_begin[s]; i < shard_begin[s + 1]; ++i) {
      const PendingTensor& t = tensors_[i];
      if (options_.tensor_data_holes && t.nbytes >= WriteOptions::kHoleMinBytes) {
        if (absl::Status st = file->Skip(AlignUp(t.nbytes, alignment)); !st.ok()) return st;
        ++written;
        bytes_so_far += t.nbytes;
        if (progress) progress(written, tensors_.size(), bytes_so_far);
        continue;
      }
      if (buffer.size() < t.nbytes) buffer.resize(t.nbytes);
      if (absl::Status st = t.fill(buffer.data(), t.nbytes); !st.ok()) {
        return absl::Status(st.code(), absl::StrFormat("%s: filling tensor '%s': %s", paths[s],
                                                       t.name, st.message()));
      }
      if (absl::Status st = file->Write(buffer.data(), t.nbytes); !st.ok()) return st;
      uint64_t pad = AlignUp(t.nbytes, alignment) - t.nbytes;
      if (absl::Status st = file->Write(zeros.data(), pad); !st.ok()) return st;
      ++written;
      bytes_so_far += t.nbytes;
      if (progress) progress(written, tensors_.size(), bytes_so_far);
    }
    if (options_.tensor_data_holes) {
      if (absl::Status st = file->TruncateHere(); !st.ok()) return st;
    }
    if (absl::Status st = file->Close(); !st.ok()) return st;
    files.push_back(std::move(file));
  }
  // Rename only once every shard is complete, so a failure leaves no partial set behind.
  for (auto& file : files) {
    if (absl::Status st = file->Commit(); !st.ok()) return st;
  }
  return paths;
}

}  // namespace stepserve::gguf
