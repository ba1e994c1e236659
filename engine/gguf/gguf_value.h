// GGUF metadata values and the key/value table (spec: shared/spec/gguf-and-quants.md, A.4-A.5).
#ifndef STEPSERVE_ENGINE_GGUF_GGUF_VALUE_H_
#define STEPSERVE_ENGINE_GGUF_GGUF_VALUE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace stepserve::gguf {

// The int32 value type ids stored in the file.
enum class ValueType : int32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
inline constexpr int32_t kValueTypeCount = 13;
std::string_view ValueTypeName(ValueType type);  // "u32", "str", "arr", ...

class Value;

// An array's elements all have `elem_type`; nested arrays (elem_type kArray) are allowed.
struct Array {
  ValueType elem_type = ValueType::kUint8;
  std::vector<Value> elems;
  bool operator==(const Array& other) const;
};

class Value {
 public:
  // The variant's index equals the ValueType id.
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, Array, uint64_t, int64_t, double>;

  Value() = default;
  Value(Storage storage) : storage_(std::move(storage)) {}  // NOLINT: implicit by design
  Value(const char* s) : storage_(std::string(s)) {}        // NOLINT

  // Convenience constructors for arrays.
  static Value MakeArray(ValueType elem_type, std::vector<Value> elems);
  static Value StringArray(const std::vector<std::string>& strings);
  static Value Int32Array(const std::vector<int32_t>& values);
  static Value Float32Array(const std::vector<float>& values);
  static Value BoolArray(const std::vector<bool>& values);

  ValueType type() const { return static_cast<ValueType>(storage_.index()); }
  const Storage& storage() const { return storage_; }

  // Any integer type or bool; nullopt for others and for uint64 values above INT64_MAX.
  std::optional<int64_t> AsInt() const;
  // Float types and integers.
  std::optional<double> AsDouble() const;
  const std::string* AsString() const { return std::get_if<std::string>(&storage_); }
  const Array* AsArray() const { return std::get_if<Array>(&storage_); }

  // Human-readable, arrays longer than `max_elems` summarised ("[1, 2, 3, ... (128896 items)]").
  std::string ToString(size_t max_elems = 8) const;

  bool operator==(const Value& other) const { return storage_ == other.storage_; }

 private:
  Storage storage_;
};

// Key/value records in file order, with lookup by key. Typed getters return errors that name the
// key and say what was found instead.
class Metadata {
 public:
  // Adds or replaces (keeping the original position) the value of `key`.
  void Set(std::string key, Value value);
  bool Erase(std::string_view key);
  const Value* Find(std::string_view key) const;
  bool Contains(std::string_view key) const { return Find(key) != nullptr; }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;  // any integer type
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // any numeric type
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  // Integer or bool arrays, any element width.
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;

  bool operator==(const Metadata& other) const { return entries_ == other.entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  absl::flat_hash_map<std::string, size_t> index_;
};

}  // namespace stepserve::gguf

#endif  // STEPSERVE_ENGINE_GGUF_GGUF_VALUE_H_
