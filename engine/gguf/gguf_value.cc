#include "engine/gguf/gguf_value.h"

#include <charconv>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/base/absl_compat.h"

namespace stepserve::gguf {
namespace {

// Long strings (chat templates, HF tokenizer JSON) are cut in ToString so a metadata dump stays
// readable; the full value is always available through AsString().
constexpr size_t kMaxStringChars = 160;

void AppendEscaped(std::string_view s, std::string* out) {
  out->push_back('"');
  size_t n = s.size() < kMaxStringChars ? s.size() : kMaxStringChars;
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out->append(absl::StrFormat("\\x%02x", c));
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
  if (n < s.size()) out->append(absl::StrFormat("... (%d bytes)", s.size()));
}

// Shortest text that reads back to the same value.
template <typename F>
void AppendFloat(F value, std::string* out) {
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), value);
  if (result.ec == std::errc()) {
    out->append(buf, result.ptr);
  } else {
    out->append(absl::StrFormat("%g", static_cast<double>(value)));
  }
}

void AppendValue(const Value& value, size_t max_elems, std::string* out) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          out->append(v ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::string>) {
          AppendEscaped(v, out);
        } else if constexpr (std::is_same_v<T, Array>) {
          out->push_back('[');
          size_t shown = v.elems.size() <= max_elems ? v.elems.size() : max_elems;
          for (size_t i = 0; i < shown; ++i) {
            if (i > 0) out->append(", ");
            AppendValue(v.elems[i], max_elems, out);
          }
          if (shown < v.elems.size()) {
            if (shown > 0) out->append(", ");
            out->append(absl::StrFormat("... (%d items)", v.elems.size()));
          }
          out->push_back(']');
        } else if constexpr (std::is_floating_point_v<T>) {
          AppendFloat(v, out);
        } else {
          out->append(std::to_string(
              static_cast<std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>(v)));
        }
      },
      value.storage());
}

std::string Describe(const Value& value) {
  if (const Array* array = value.AsArray()) {
    return absl::StrFormat("arr[%s] of %d", ValueTypeName(array->elem_type), array->elems.size());
  }
  return std::string(ValueTypeName(value.type()));
}

absl::Status MissingKey(std::string_view key) {
  return absl::NotFoundError(absl::StrFormat("metadata key '%s' not found", key));
}

absl::Status WrongType(std::string_view key, std::string_view wanted, const Value& value) {
  return absl::InvalidArgumentError(
      absl::StrFormat("metadata key '%s': expected %s, found %s", key, wanted, Describe(value)));
}

bool IsIntegerType(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kUint16:
    case ValueType::kInt16:
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kUint64:
    case ValueType::kInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string_view ValueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
      return "u8";
    case ValueType::kInt8:
      return "i8";
    case ValueType::kUint16:
      return "u16";
    case ValueType::kInt16:
      return "i16";
    case ValueType::kUint32:
      return "u32";
    case ValueType::kInt32:
      return "i32";
    case ValueType::kFloat32:
      return "f32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "str";
    case ValueType::kArray:
      return "arr";
    case ValueType::kUint64:
      return "u64";
    case ValueType::kInt64:
      return "i64";
    case ValueType::kFloat64:
      return "f64";
  }
  return "unknown";
}

bool Array::operator==(const Array& other) const {
  return elem_type == other.elem_type && elems == other.elems;
}

Value Value::MakeArray(ValueType elem_type, std::vector<Value> elems) {
  Array array;
  array.elem_type = elem_type;
  array.elems = std::move(elems);
  return Value(
      Storage(std::in_place_index<static_cast<size_t>(ValueType::kArray)>, std::move(array)));
}

Value Value::StringArray(const std::vector<std::string>& strings) {
  std::vector<Value> elems;
  elems.reserve(strings.size());
  for (const std::string& s : strings) elems.emplace_back(Storage(s));
  return MakeArray(ValueType::kString, std::move(elems));
}

Value Value::Int32Array(const std::vector<int32_t>& values) {
  std::vector<Value> elems;
  elems.reserve(values.size());
  for (int32_t v : values) elems.emplace_back(Storage(v));
  return MakeArray(ValueType::kInt32, std::move(elems));
}

Value Value::Float32Array(const std::vector<float>& values) {
  std::vector<Value> elems;
  elems.reserve(values.size());
  for (float v : values) elems.emplace_back(Storage(v));
  return MakeArray(ValueType::kFloat32, std::move(elems));
}

Value Value::BoolArray(const std::vector<bool>& values) {
  std::vector<Value> elems;
  elems.reserve(values.size());
  for (bool v : values) elems.emplace_back(Storage(v));
  return MakeArray(ValueType::kBool, std::move(elems));
}

std::optional<int64_t> Value::AsInt() const {
  return std::visit(
      [](const auto& v) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? 1 : 0;
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
          return static_cast<int64_t>(v);
        } else if constexpr (std::is_integral_v<T>) {
          return static_cast<int64_t>(v);
        } else {
          return std::nullopt;
        }
      },
      storage_);
}

std::optional<double> Value::AsDouble() const {
  return std::visit(
      [](const auto& v) -> std::optional<double> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string> ||
                      std::is_same_v<T, Array>) {
          return std::nullopt;
        } else {
          return static_cast<double>(v);
        }
      },
      storage_);
}

std::string Value::ToString(size_t max_elems) const {
  std::string out;
  AppendValue(*this, max_elems, &out);
  return out;
}

void Metadata::Set(std::string key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

bool Metadata::Erase(std::string_view key) {
  auto it = index_.find(AbslView(key));
  if (it == index_.end()) return false;
  size_t pos = it->second;
  index_.erase(it);
  entries_.erase(entries_.begin() + static_cast<ptrdiff_t>(pos));
  for (auto& [k, v] : index_) {
    if (v > pos) --v;
  }
  return true;
}

const Value* Metadata::Find(std::string_view key) const {
  auto it = index_.find(AbslView(key));
  if (it == index_.end()) return nullptr;
  return &entries_[it->second].second;
}

absl::StatusOr<std::string> Metadata::GetString(std::string_view key) const {
  const Value* value = Find(key);
  if (value == nullptr) return MissingKey(key);
  if (const std::string* s = value->AsString()) return *s;
  return WrongType(key, "str", *value);
}

absl::StatusOr<int64_t> Metadata::GetInt(std::string_view key) const {
  const Value* value = Find(key);
  if (value == nullptr) return MissingKey(key);
  if (!IsIntegerType(value->type())) return WrongType(key, "an integer", *value);
  std::optional<int64_t> v = value->AsInt();
  if (!v.has_value()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "metadata key '%s': u64 value %s does not fit in int64", key, value->ToString()));
  }
  return *v;
}

absl::StatusOr<double> Metadata::GetFloat(std::string_view key) const {
  const Value* value = Find(key);
  if (value == nullptr) return MissingKey(key);
  std::optional<double> v = value->AsDouble();
  if (!v.has_value()) return WrongType(key, "a number", *value);
  return *v;
}

absl::StatusOr<bool> Metadata::GetBool(std::string_view key) const {
  const Value* value = Find(key);
  if (value == nullptr) return MissingKey(key);
  if (const bool* b = std::get_if<bool>(&value->storage())) return *b;
  return WrongType(key, "bool", *value);
}

absl::StatusOr<std::vector<int64_t>> Metadata::GetIntArray(std::string_view key) const {
  const Value* value = Find(key);
  if (value == nullptr) return MissingKey(key);
  const Array* array = value->AsArray();
  if (array == nullptr ||
      !(IsIntegerType(array->elem_type) || array->elem_type == ValueType::kBool)) {
    return WrongType(key, "an integer array", *value);
  }
  std::vector<int64_t> out;
  out.reserve(array->elems.size());
  for (size_t i = 0; i < array->elems.size(); ++i) {
    std::optional<int64_t> v = array->elems[i].AsInt();
    if (!v.has_value()) {
      return absl::OutOfRangeError(
          absl::StrFormat("metadata key '%s': element %d (%s) does not fit in int64", key, i,
                          array->elems[i].ToString()));
    }
    out.push_back(*v);
  }
  return out;
}

absl::StatusOr<std::vector<double>> Metadata::GetFloatArray(std::string_view key) const {
  const Value* value = Find(key);
  if (value == nullptr) return MissingKey(key);
  const Array* array = value->AsArray();
  if (array == nullptr || array->elem_type == ValueType::kBool ||
      array->elem_type == ValueType::kString || array->elem_type == ValueType::kArray) {
    return WrongType(key, "a numeric array", *value);
  }
  std::vector<double> out;
  out.reserve(array->elems.size());
  for (const Value& elem : array->elems) out.push_back(elem.AsDouble().value_or(0.0));
  return out;
}

absl::StatusOr<std::vector<std::string>> Metadata::GetStringArray(std::string_view key) const {
  const Value* value = Find(key);
  if (value == nullptr) return MissingKey(key);
  const Array* array = value->AsArray();
  if (array == nullptr || array->elem_type != ValueType::kString) {
    return WrongType(key, "a string array", *value);
  }
  std::vector<std::string> out;
  out.reserve(array->elems.size());
  for (size_t i = 0; i < array->elems.size(); ++i) {
    const std::string* s = array->elems[i].AsString();
    // Arrays built in code may mix element types; files never do (the reader enforces it).
    if (s == nullptr) return WrongType(absl::StrFormat("%s[%d]", key, i), "str", array->elems[i]);
    out.push_back(*s);
  }
  return out;
}

}  // namespace stepserve::gguf
