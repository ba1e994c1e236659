// Dynamic value for the Jinja interpreter and the JSON of chat requests (messages, tools, tool-call
// arguments). Semantics follow Python as seen through jinja2, because templates are written against
// python3-jinja2 and we must render byte-identical text: dicts keep insertion order, str() of a
// list is Python's repr, floats print like Python's repr, and `undefined` is a distinct kind.
#ifndef STEPSERVE_ENGINE_TOKENIZER_JINJA_VALUE_H_
#define STEPSERVE_ENGINE_TOKENIZER_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace stepserve::jinja {

class Value;
using Array = std::vector<Value>;

// Insertion-ordered string-keyed map (Python dict order). Linear lookup: chat objects are small.
class Object {
 public:
  const Value* Find(std::string_view key) const;
  Value* Find(std::string_view key);
  // Python `d[k] = v`: replaces in place if present, else appends.
  void Set(std::string key, Value value);
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using NativeFunction = std::function<absl::StatusOr<Value>(const CallArgs&)>;

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kArray,
    kObject,
    kNamespace,
    kFunction
  };

  Value() = default;  // undefined
  static Value Undefined(std::string hint = "") {
    Value v;
    v.str_ = std::move(hint);
    return v;
  }
  static Value None() { return WithKind(Kind::kNone); }
  static Value Bool(bool b) {
    Value v = WithKind(Kind::kBool);
    v.int_ = b ? 1 : 0;
    return v;
  }
  static Value Int(int64_t i) {
    Value v = WithKind(Kind::kInt);
    v.int_ = i;
    return v;
  }
  static Value Float(double d) {
    Value v = WithKind(Kind::kFloat);
    v.float_ = d;
    return v;
  }
  // `safe` marks markupsafe.Markup (result of the `safe` filter): `+` with it HTML-escapes the
  // other operand, exactly as jinja2 does without autoescape.
  static Value String(std::string s, bool safe = false) {
    Value v = WithKind(Kind::kString);
    v.str_ = std::move(s);
    v.safe_ = safe;
    return v;
  }
  static Value MakeArray(Array a = {}) {
    Value v = WithKind(Kind::kArray);
    v.array_ = std::make_shared<Array>(std::move(a));
    return v;
  }
  static Value MakeObject(Object o = {}) {
    Value v = WithKind(Kind::kObject);
    v.object_ = std::make_shared<Object>(std::move(o));
    return v;
  }
  static Value MakeNamespace(Object o = {}) {
    Value v = WithKind(Kind::kNamespace);
    v.object_ = std::make_shared<Object>(std::move(o));
    return v;
  }
  static Value Function(std::string name, NativeFunction fn) {
    Value v = WithKind(Kind::kFunction);
    v.str_ = std::move(name);
    v.function_ = std::make_shared<NativeFunction>(std::move(fn));
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python numbers include bool.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_safe() const { return safe_; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // also valid for bool
  double as_double() const { return is_float() ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return str_; }  // string value, undefined hint, function name
  const Array& array() const { return *array_; }
  Array& mutable_array() { return *array_; }
  const Object& object() const { return *object_; }  // object or namespace
  Object& mutable_object() { return *object_; }
  const NativeFunction& function() const { return *function_; }

  // Python truthiness.
  bool Truthy() const;
  // Python str(value); undefined renders as "".
  std::string PyStr() const;
  // Python repr(value).
  std::string PyRepr() const;
  // Python ==.
  bool Equals(const Value& other) const;
  // jinja2's type names for messages ("dict object", "str object", ...).
  std::string TypeName() const;

 private:
  static Value WithKind(Kind k) {
    Value v;
    v.kind_ = k;
    return v;
  }
  Kind kind_ = Kind::kUndefined;
  bool safe_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<Array> array_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<NativeFunction> function_;
};

// Python repr() of a float (shortest round-trip digits, "1e+20", "0.0001", "1.0").
std::string PyFloatRepr(double d);
// Python repr() of a str.
std::string PyStringRepr(std::string_view s);

// json.loads: objects keep key order (duplicates: last value at first position), integers that
// fit int64 become kInt, other numbers kFloat. Rejects trailing garbage and nesting deeper than
// 512. Errors name the byte offset.
absl::StatusOr<Value> ParseJson(std::string_view text);

struct JsonDumpOptions {
  bool ensure_ascii = false;  // HF's tojson default keeps non-ASCII
  std::optional<int> indent;  // json.dumps indent (None = single line)
  // json.dumps separators; unset = Python default ("," with indent else ", ", and ": ").
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
};
// json.dumps with the given options. Undefined, namespaces and functions are not serializable
// (TypeError in Python), reported as InvalidArgument.
absl::StatusOr<std::string> DumpJson(const Value& value, const JsonDumpOptions& options = {});

// UTF-8 helpers shared by the interpreter (Python strings index by code point).
std::vector<size_t> CodePointOffsets(std::string_view s);  // start offsets plus s.size() at end
bool IsPySpace(uint32_t cp);
// Decodes one code point at `pos` (invalid bytes decode as themselves); advances pos.
uint32_t DecodeUtf8(std::string_view s, size_t& pos);
void AppendUtf8(std::string& out, uint32_t cp);

}  // namespace stepserve::jinja

#endif  // STEPSERVE_ENGINE_TOKENIZER_JINJA_VALUE_H_
