#include "engine/gguf/gguf_parser.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/base/absl_compat.h"
#include "engine/quant/ggml_type.h"

namespace stepserve::gguf::internal {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian
constexpr uint64_t kHeaderBytes = 24;
// Smallest possible encodings, used to reject counts that cannot fit in the remaining bytes
// before anything is allocated for them.
// Key length, type, 1-byte value; empty keys are rejected later with their own message.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

uint64_t MinValueBytes(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
    case ValueType::kString:
      return 8;
    case ValueType::kArray:
      return 12;
  }
  return 1;
}

// Bounds-checked parsing over one file image. Every read checks the remaining length first, so no
// input can make it read outside `bytes`.
class Parser {
 public:
  Parser(std::string_view bytes, const std::string& name)
      : data_(reinterpret_cast<const uint8_t*>(bytes.data())), size_(bytes.size()), name_(name) {}

  absl::StatusOr<ParsedShard> Run(int shard_index, const OpenOptions& options);

 private:
  uint64_t remaining() const { return size_ - pos_; }

  absl::Status Error(uint64_t offset, std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrFormat("%s: offset %d: %s", name_, offset, message));
  }

  absl::Status Truncated(uint64_t offset, std::string_view what, uint64_t need) const {
    return Error(offset, absl::StrFormat("%s needs %d bytes but the file has only %d left "
                                         "(truncated file?)",
                                         what, need, size_ - offset));
  }

  template <typename T>
  absl::Status Read(T* out, std::string_view what) {
    if (remaining() < sizeof(T)) return Truncated(pos_, what, sizeof(T));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  // Reads a GGUF string (A.3) as a view into the image.
  absl::Status ReadString(std::string_view what, std::string_view* out);
  absl::Status ReadValueType(std::string_view what, ValueType* out);
  absl::Status ReadValue(ValueType type, int depth, std::string_view key, Value* out);
  absl::Status ReadArray(int depth, std::string_view key, Value* out);
  template <typename T>
  void ReadScalarElems(uint64_t n, std::vector<Value>* elems);
  absl::Status ReadTensorInfo(size_t index, TensorInfo* out);

  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& name_;
};

absl::Status Parser::ReadString(std::string_view what, std::string_view* out) {
  uint64_t start = pos_;
  uint64_t len = 0;
  if (absl::Status s = Read(&len, what); !s.ok()) return s;
  if (len > kMaxStringLength) {
    return Error(start, absl::StrFormat("%s: string length %d exceeds the 2^30 limit", what, len));
  }
  if (len > remaining()) {
    return Error(start, absl::StrFormat("%s: string length %d runs past the end of the file (%d "
                                        "bytes left)",
                                        what, len, remaining()));
  }
  *out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), len);
  pos_ += len;
  return absl::OkStatus();
}

absl::Status Parser::ReadValueType(std::string_view what, ValueType* out) {
  uint64_t start = pos_;
  int32_t id = 0;
  if (absl::Status s = Read(&id, what); !s.ok()) return s;
  if (id < 0 || id >= kValueTypeCount) {
    return Error(start, absl::StrFormat("%s: unknown value type id %d", what, id));
  }
  *out = static_cast<ValueType>(id);
  return absl::OkStatus();
}

template <typename T>
void Parser::ReadScalarElems(uint64_t n, std::vector<Value>* elems) {
  // The caller checked n * sizeof(T) <= remaining().
  elems->reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    T v{};
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    elems->emplace_back(Value::Storage(std::in_place_type<T>, v));
  }
}

absl::Status Parser::ReadArray(int depth, std::string_view key, Value* out) {
  uint64_t start = pos_;
  if (depth >= kMaxArrayDepth) {
    return Error(start, absl::StrFormat("key '%s': arrays nested deeper than %d levels", key,
                                        kMaxArrayDepth));
  }
  ValueType elem_type;
  if (absl::Status s =
          ReadValueType(absl::StrFormat("key '%s': array element type", key), &elem_type);
      !s.ok()) {
    return s;
  }
  uint64_t count_offset = pos_;
  uint64_t n = 0;
  if (absl::Status s = Read(&n, "array length"); !s.ok()) return s;
  if (n > kMaxArrayElements) {
    return Error(count_offset,
                 absl::StrFormat("key '%s': array length %d exceeds the 2^30 limit", key, n));
  }
  uint64_t min_bytes = MinValueBytes(elem_type);
  if (n > remaining() / min_bytes) {
    return Error(count_offset,
                 absl::StrFormat("key '%s': array of %d %s elements cannot fit in the %d bytes "
                                 "left in the file",
                                 key, n, ValueTypeName(elem_type), remaining()));
  }
  Array array;
  array.elem_type = elem_type;
  switch (elem_type) {
    case ValueType::kUint8:
      ReadScalarElems<uint8_t>(n, &array.elems);
      break;
    case ValueType::kInt8:
      ReadScalarElems<int8_t>(n, &array.elems);
      break;
    case ValueType::kUint16:
      ReadScalarElems<uint16_t>(n, &array.elems);
      break;
    case ValueType::kInt16:
      ReadScalarElems<int16_t>(n, &array.elems);
      break;
    case ValueType::kUint32:
      ReadScalarElems<uint32_t>(n, &array.elems);
      break;
    case ValueType::kInt32:
      ReadScalarElems<int32_t>(n, &array.elems);
      break;
    case ValueType::kFloat32:
      ReadScalarElems<float>(n, &array.elems);
      break;
    case ValueType::kUint64:
      ReadScalarElems<uint64_t>(n, &array.elems);
      break;
    case ValueType::kInt64:
      ReadScalarElems<int64_t>(n, &array.elems);
      break;
    case ValueType::kFloat64:
      ReadScalarElems<double>(n, &array.elems);
      break;
    case ValueType::kBool:
      array.elems.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        uint8_t b = data_[pos_];
        if (b > 1) {
          return Error(pos_, absl::StrFormat("key '%s': element %d: bool byte is %d, not 0 or 1",
                                             key, i, b));
        }
        ++pos_;
        array.elems.emplace_back(Value::Storage(b != 0));
      }
      break;
    case ValueType::kString: {
      array.elems.reserve(n);
      std::string what = absl::StrFormat("key '%s': string element", key);
      for (uint64_t i = 0; i < n; ++i) {
        std::string_view s;
        if (absl::Status st = ReadString(what, &s); !st.ok()) return st;
        array.elems.emplace_back(Value::Storage(
            std::in_place_index<static_cast<size_t>(ValueType::kString)>, s.data(), s.size()));
      }
      break;
    }
    case ValueType::kArray:
      array.elems.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        Value elem;
        if (absl::Status st = ReadArray(depth + 1, key, &elem); !st.ok()) return st;
        array.elems.push_back(std::move(elem));
      }
      break;
  }
  *out = Value(Value::Storage(std::in_place_index<static_cast<size_t>(ValueType::kArray)>,
                              std::move(array)));
  return absl::OkStatus();
}

absl::Status Parser::ReadValue(ValueType type, int depth, std::string_view key, Value* out) {
  uint64_t start = pos_;
  auto scalar = [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    T v = zero;
    if (absl::Status s = Read(&v, absl::StrFormat("key '%s': %s value", key, ValueTypeName(type)));
        !s.ok()) {
      return s;
    }
    *out = Value(Value::Storage(std::in_place_type<T>, v));
    return absl::OkStatus();
  };
  switch (type) {
    case ValueType::kUint8:
      return scalar(uint8_t{});
    case ValueType::kInt8:
      return scalar(int8_t{});
    case ValueType::kUint16:
      return scalar(uint16_t{});
    case ValueType::kInt16:
      return scalar(int16_t{});
    case ValueType::kUint32:
      return scalar(uint32_t{});
    case ValueType::kInt32:
      return scalar(int32_t{});
    case ValueType::kFloat32:
      return scalar(float{});
    case ValueType::kUint64:
      return scalar(uint64_t{});
    case ValueType::kInt64:
      return scalar(int64_t{});
    case ValueType::kFloat64:
      return scalar(double{});
    case ValueType::kBool: {
      uint8_t b = 0;
      if (absl::Status s = Read(&b, absl::StrFormat("key '%s': bool value", key)); !s.ok()) {
        return s;
      }
      // The reference reader takes any nonzero byte as true; the written spec calls other values
      // invalid. We reject them so a re-written file is bit-identical to what was read.
      if (b > 1) {
        return Error(start, absl::StrFormat("key '%s': bool byte is %d, not 0 or 1", key, b));
      }
      *out = Value(Value::Storage(b != 0));
      return absl::OkStatus();
    }
    case ValueType::kString: {
      std::string_view s;
      if (absl::Status st = ReadString(absl::StrFormat("key '%s': value", key), &s); !st.ok()) {
        return st;
      }
      *out = Value(Value::Storage(std::in_place_index<static_cast<size_t>(ValueType::kString)>,
                                  s.data(), s.size()));
      return absl::OkStatus();
    }
    case ValueType::kArray:
      return ReadArray(depth, key, out);
  }
  return Error(start, "unreachable value type");
}

absl::Status Parser::ReadTensorInfo(size_t index, TensorInfo* out) {
  uint64_t start = pos_;
  std::string_view name;
  if (absl::Status s = ReadString(absl::StrFormat("tensor #%d name", index), &name); !s.ok()) {
    return s;
  }
  if (name.size() > kMaxTensorNameLength) {
    return Error(start, absl::StrFormat("tensor #%d name '%s' is %d bytes; the limit is %d", index,
                                        name, name.size(), kMaxTensorNameLength));
  }
  out->name.assign(name.data(), name.size());
  std::string what = absl::StrFormat("tensor '%s'", out->name);
  uint64_t dims_offset = pos_;
  uint32_t n_dims = 0;
  if (absl::Status s = Read(&n_dims, what); !s.ok()) return s;
  if (n_dims > 4) {
    return Error(dims_offset,
                 absl::StrFormat("%s: n_dims is %d; at most 4 are allowed", what, n_dims));
  }
  out->n_dims = n_dims;
  out->ne = {1, 1, 1, 1};
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne_offset = pos_;
    if (absl::Status s = Read(&out->ne[d], what); !s.ok()) return s;
    if (out->ne[d] < 0) {
      return Error(ne_offset, absl::StrFormat("%s: ne[%d] is negative (%d)", what, d, out->ne[d]));
    }
  }
  uint64_t type_offset = pos_;
  int32_t type_id = 0;
  if (absl::Status s = Read(&type_id, what); !s.ok()) return s;
  std::optional<GgmlTypeInfo> type = LookupGgmlType(type_id);
  if (!type.has_value()) {
    return Error(type_offset,
                 absl::StrFormat("%s: unknown or removed tensor type id %d", what, type_id));
  }
  out->type = type->type;
  if (out->ne[0] % type->block_elems != 0) {
    return Error(type_offset,
                 absl::StrFormat("%s: ne[0] = %d is not a multiple of the %s block size %d", what,
                                 out->ne[0], type->name, type->block_elems));
  }
  // Element count and byte size must both fit in int64 (callers multiply ne freely).
  int64_t elems = 1;
  int64_t bytes = 0;
  bool overflow = __builtin_mul_overflow(out->ne[0] / type->block_elems, type->block_bytes, &bytes);
  for (int d = 0; d < 4 && !overflow; ++d) {
    overflow = __builtin_mul_overflow(elems, out->ne[d], &elems) ||
               (d > 0 && __builtin_mul_overflow(bytes, out->ne[d], &bytes));
  }
  if (overflow) {
    return Error(dims_offset, absl::StrFormat("%s: shape %s of type %s overflows 64-bit sizes",
                                              what, out->ShapeString(), type->name));
  }
  out->nbytes = static_cast<uint64_t>(bytes);
  if (absl::Status s = Read(&out->offset, what); !s.ok()) return s;
  return absl::OkStatus();
}

absl::StatusOr<ParsedShard> Parser::Run(int shard_index, const OpenOptions& options) {
  ParsedShard shard;
  shard.info.path = name_;
  shard.info.file_size = size_;
  if (size_ < 4 || std::memcmp(data_, "GGUF", 4) != 0) {
    if (size_ < 4) return Truncated(0, "magic", 4);
    return Error(0, absl::StrFormat("bad magic %02x %02x %02x %02x; not a GGUF file", data_[0],
                                    data_[1], data_[2], data_[3]));
  }
  pos_ = 4;
  if (size_ < kHeaderBytes) return Truncated(4, "header", kHeaderBytes - 4);
  uint32_t version = 0;
  (void)Read(&version, "version");
  if ((version & 0xFFFF) == 0 && version != 0) {
    return Error(4, absl::StrFormat("version field reads 0x%08x: the file is big-endian, and only "
                                    "little-endian GGUF is supported",
                                    version));
  }
  if (version == 1) return Error(4, "GGUF version 1 is obsolete and not supported");
  if (version != 2 && version != 3) {
    return Error(4, absl::StrFormat("unsupported GGUF version %d (expected 2 or 3)", version));
  }
  shard.info.version = version;
  int64_t n_tensors = 0;
  int64_t n_kv = 0;
  (void)Read(&n_tensors, "n_tensors");
  (void)Read(&n_kv, "n_kv");
  if (n_tensors < 0) return Error(8, absl::StrFormat("n_tensors is negative (%d)", n_tensors));
  if (n_kv < 0) return Error(16, absl::StrFormat("n_kv is negative (%d)", n_kv));
  if (static_cast<uint64_t>(n_kv) > remaining() / kMinKvBytes) {
    return Error(16, absl::StrFormat("n_kv = %d records cannot fit in the %d bytes after the "
                                     "header",
                                     n_kv, remaining()));
  }
  if (static_cast<uint64_t>(n_tensors) > remaining() / kMinTensorInfoBytes) {
    return Error(8, absl::StrFormat("n_tensors = %d records cannot fit in the %d bytes after the "
                                    "header",
                                    n_tensors, remaining()));
  }
  shard.info.n_tensors = n_tensors;
  shard.info.n_kv = n_kv;

  for (int64_t i = 0; i < n_kv; ++i) {
    uint64_t record_offset = pos_;
    std::string_view key;
    if (absl::Status s = ReadString(absl::StrFormat("metadata record #%d key", i), &key); !s.ok()) {
      return s;
    }
    if (key.empty()) {
      return Error(record_offset, absl::StrFormat("metadata record #%d has an empty key", i));
    }
    if (shard.metadata.Contains(key)) {
      return Error(record_offset, absl::StrFormat("duplicate metadata key '%s'", key));
    }
    ValueType type;
    if (absl::Status s = ReadValueType(absl::StrFormat("key '%s'", key), &type); !s.ok()) {
      return s;
    }
    Value value;
    if (absl::Status s = ReadValue(type, 0, key, &value); !s.ok()) return s;
    shard.metadata.Set(std::string(key), std::move(value));
  }

  uint32_t alignment = kDefaultAlignment;
  if (const Value* a = shard.metadata.Find("general.alignment")) {
    const uint32_t* v = std::get_if<uint32_t>(&a->storage());
    if (v == nullptr) {
      return Error(kHeaderBytes, absl::StrFormat("key 'general.alignment' must be u32, found %s",
                                                 ValueTypeName(a->type())));
    }
    if (*v == 0 || (*v & (*v - 1)) != 0) {
      return Error(kHeaderBytes, absl::StrFormat("key 'general.alignment' = %d is not a nonzero "
                                                 "power of two",
                                                 *v));
    }
    alignment = *v;
  }
  shard.info.alignment = alignment;

  if (static_cast<uint64_t>(n_tensors) > remaining() / kMinTensorInfoBytes) {
    return Error(8, absl::StrFormat("n_tensors = %d records cannot fit in the %d bytes left after "
                                    "the metadata",
                                    n_tensors, remaining()));
  }
  shard.tensors.resize(static_cast<size_t>(n_tensors));
  std::vector<uint64_t> info_offsets(static_cast<size_t>(n_tensors));
  absl::flat_hash_map<std::string_view, size_t> names;
  names.reserve(static_cast<size_t>(n_tensors));
  for (size_t i = 0; i < shard.tensors.size(); ++i) {
    info_offsets[i] = pos_;
    if (absl::Status s = ReadTensorInfo(i, &shard.tensors[i]); !s.ok()) return s;
    shard.tensors[i].shard = shard_index;
  }
  for (size_t i = 0; i < shard.tensors.size(); ++i) {
    // Views into the tensors' own strings: stable because the vector is no longer resized.
    auto [it, inserted] = names.emplace(shard.tensors[i].name, i);
    if (!inserted) {
      return Error(info_offsets[i], absl::StrFormat("duplicate tensor name '%s' (also tensor #%d)",
                                                    shard.tensors[i].name, it->second));
    }
  }

  uint64_t data_offset = pos_;
  if (n_tensors > 0) {
    data_offset = (pos_ + alignment - 1) / alignment * alignment;  // pos_ < 2^63: no overflow
    if (data_offset > size_) {
      return Error(pos_, absl::StrFormat("data section would start at %d, past the end of the "
                                         "file (%d bytes)",
                                         data_offset, size_));
    }
  }
  shard.info.data_offset = data_offset;

  uint64_t expected = 0;
  for (size_t i = 0; i < shard.tensors.size(); ++i) {
    TensorInfo& t = shard.tensors[i];
    uint64_t at = info_offsets[i];
    if (t.offset % alignment != 0) {
      return Error(at, absl::StrFormat("tensor '%s': data offset %d is not a multiple of the "
                                       "alignment %d",
                                       t.name, t.offset, alignment));
    }
    uint64_t avail = size_ - data_offset;
    if (t.offset > avail || t.nbytes > avail - t.offset) {
      return Error(at, absl::StrFormat("tensor '%s': data [%d, +%d) relative to the data section "
                                       "at %d runs past the end of the file (%d bytes)",
                                       t.name, t.offset, t.nbytes, data_offset, size_));
    }
    if (options.strict_layout) {
      if (t.offset != expected) {
        return Error(at, absl::StrFormat("tensor '%s': offset %d but the back-to-back layout "
                                         "puts it at %d",
                                         t.name, t.offset, expected));
      }
      expected = t.offset + (t.nbytes + alignment - 1) / alignment * alignment;
    }
    t.file_offset = data_offset + t.offset;
    t.data = data_ + t.file_offset;
  }
  return shard;
}

}  // namespace

absl::StatusOr<ParsedShard> ParseShard(std::string_view bytes, const std::string& name,
                                       int shard_index, const OpenOptions& options) {
  Parser parser(bytes, name);
  return parser.Run(shard_index, options);
}

}  // namespace stepserve::gguf::internal
