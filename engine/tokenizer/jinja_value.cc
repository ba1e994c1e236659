#include "engine/tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace stepserve::jinja {

const Value* Object::Find(std::string_view key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Object::Find(std::string_view key) {
  for (auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Object::Set(std::string key, Value value) {
  if (Value* existing = Find(key)) {
    *existing = std::move(value);
    return;
  }
  items_.emplace_back(std::move(key), std::move(value));
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0.0;
    case Kind::kString:
      return !str_.empty();
    case Kind::kArray:
      return !array_->empty();
    case Kind::kObject:
      return object_->size() != 0;
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits in scientific form, then laid out by Python's repr rules.
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = !sci.empty() && sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  int exponent = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -5 + 1 && exponent < 16) {
    if (exponent >= 0) {
      std::string int_part = digits.substr(0, std::min<size_t>(digits.size(), exponent + 1));
      while (static_cast<int>(int_part.size()) < exponent + 1) int_part.push_back('0');
      std::string frac = digits.size() > static_cast<size_t>(exponent + 1)
                             ? digits.substr(exponent + 1)
                             : std::string("0");
      out += int_part + "." + frac;
    } else {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += absl::StrFormat("e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

uint32_t DecodeUtf8(std::string_view s, size_t& pos) {
  unsigned char c = s[pos];
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || pos + len > s.size()) {
    ++pos;
    return c;
  }
  uint32_t cp = len == 1 ? c : c & (0xFF >> (len + 1));
  for (int i = 1; i < len; ++i) {
    unsigned char cc = s[pos + i];
    if ((cc & 0xC0) != 0x80) {
      ++pos;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  pos += len;
  return cp;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  size_t pos = 0;
  while (pos < s.size()) {
    offsets.push_back(pos);
    DecodeUtf8(s, pos);
  }
  offsets.push_back(s.size());
  return offsets;
}

bool IsPySpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string PyStringRepr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    uint32_t cp = DecodeUtf8(s, pos);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
      out += absl::StrFormat("\\x%02x", cp);
    } else {
      AppendUtf8(out, cp);
    }
  }
  out.push_back(quote);
  return out;
}

std::string Value::PyRepr() const {
  switch (kind_) {
    case Kind::kString:
      return PyStringRepr(str_);
    case Kind::kArray: {
      std::string out = "[";
      for (size_t i = 0; i < array_->size(); ++i) {
        if (i) out += ", ";
        out += (*array_)[i].PyRepr();
      }
      return out + "]";
    }
    case Kind::kObject: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : object_->items()) {
        if (!first) out += ", ";
        first = false;
        out += PyStringRepr(k) + ": " + v.PyRepr();
      }
      return out + "}";
    }
    default:
      return PyStr();
  }
}

std::string Value::PyStr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return PyFloatRepr(float_);
    case Kind::kString:
      return str_;
    case Kind::kArray:
    case Kind::kObject:
      return PyRepr();
    case Kind::kNamespace:
      return "<Namespace>";
    case Kind::kFunction:
      return "<function " + str_ + ">";
  }
  return "";
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return as_double() == other.as_double();
    return int_ == other.int_;
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return str_ == other.str_;
    case Kind::kArray: {
      if (array_->size() != other.array_->size()) return false;
      for (size_t i = 0; i < array_->size(); ++i) {
        if (!(*array_)[i].Equals((*other.array_)[i])) return false;
      }
      return true;
    }
    case Kind::kObject: {
      if (object_->size() != other.object_->size()) return false;
      for (const auto& [k, v] : object_->items()) {
        const Value* o = other.object_->Find(k);
        if (o == nullptr || !v.Equals(*o)) return false;
      }
      return true;
    }
    default:
      return object_ == other.object_ && function_ == other.function_;
  }
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kArray:
      return "list";
    case Kind::kObject:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "object";
}

// ---------------------------------------------------------------------------------------------
// JSON parsing.

namespace {

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  absl::StatusOr<Value> ParseDocument() {
    auto v = ParseValue(0);
    if (!v.ok()) return v;
    SkipWs();
    if (pos_ != text_.size()) return Error("extra data after JSON value");
    return v;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrFormat("JSON: %s at byte %d", what, pos_));
  }
  void SkipWs() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(std::string_view lit) {
    if (text_.substr(pos_, lit.size()) == lit) {
      pos_ += lit.size();
      return true;
    }
    return false;
  }

  absl::StatusOr<Value> ParseValue(int depth) {
    if (depth > 512) return Error("nesting too deep");
    SkipWs();
    if (pos_ >= text_.size()) return Error("unexpected end of input");
    char c = text_[pos_];
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') {
      auto s = ParseString();
      if (!s.ok()) return s.status();
      return Value::String(*std::move(s));
    }
    if (Consume("true")) return Value::Bool(true);
    if (Consume("false")) return Value::Bool(false);
    if (Consume("null")) return Value::None();
    if (Consume("NaN")) return Value::Float(NAN);
    if (Consume("Infinity")) return Value::Float(INFINITY);
    if (Consume("-Infinity")) return Value::Float(-INFINITY);
    return ParseNumber();
  }

  absl::StatusOr<Value> ParseNumber() {
    size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    size_t int_start = pos_;
    while (pos_ < text_.size() && isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (pos_ == int_start) return Error("invalid value");
    if (text_[int_start] == '0' && pos_ - int_start > 1) return Error("leading zero in number");
    bool is_float = false;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      size_t frac = ++pos_;
      while (pos_ < text_.size() && isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      if (pos_ == frac) return Error("invalid number");
      is_float = true;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      size_t exp = pos_;
      while (pos_ < text_.size() && isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      if (pos_ == exp) return Error("invalid number exponent");
      is_float = true;
    }
    std::string_view num = text_.substr(start, pos_ - start);
    if (!is_float) {
      int64_t i = 0;
      auto res = std::from_chars(num.data(), num.data() + num.size(), i);
      if (res.ec == std::errc() && res.ptr == num.data() + num.size()) return Value::Int(i);
      return Error("integer out of int64 range");
    }
    std::string copy(num);
    return Value::Float(std::strtod(copy.c_str(), nullptr));
  }

  absl::StatusOr<uint32_t> ParseHex4() {
    if (pos_ + 4 > text_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= h - '0';
      else if (h >= 'a' && h <= 'f')
        v |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F')
        v |= h - 'A' + 10;
      else
        return Error("invalid \\u escape");
    }
    return v;
  }

  absl::StatusOr<std::string> ParseString() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) return Error("unterminated string");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) return Error("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          auto cp = ParseHex4();
          if (!cp.ok()) return cp.status();
          uint32_t code = *cp;
          if (code >= 0xD800 && code < 0xDC00 && text_.substr(pos_, 2) == "\\u") {
            size_t save = pos_;
            pos_ += 2;
            auto lo = ParseHex4();
            if (lo.ok() && *lo >= 0xDC00 && *lo < 0xE000) {
              code = 0x10000 + ((code - 0xD800) << 10) + (*lo - 0xDC00);
            } else {
              pos_ = save;
            }
          }
          AppendUtf8(out, code);
          break;
        }
        default:
          return Error("invalid escape");
      }
    }
  }

  absl::StatusOr<Value> ParseArray(int depth) {
    ++pos_;
    Array items;
    SkipWs();
    if (Consume("]")) return Value::MakeArray(std::move(items));
    while (true) {
      auto v = ParseValue(depth + 1);
      if (!v.ok()) return v;
      items.push_back(*std::move(v));
      SkipWs();
      if (Consume(",")) continue;
      if (Consume("]")) return Value::MakeArray(std::move(items));
      return Error("expected ',' or ']'");
    }
  }

  absl::StatusOr<Value> ParseObject(int depth) {
    ++pos_;
    Object obj;
    SkipWs();
    if (Consume("}")) return Value::MakeObject(std::move(obj));
    while (true) {
      SkipWs();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected string key");
      auto key = ParseString();
      if (!key.ok()) return key.status();
      SkipWs();
      if (!Consume(":")) return Error("expected ':'");
      auto v = ParseValue(depth + 1);
      if (!v.ok()) return v;
      obj.Set(*std::move(key), *std::move(v));
      SkipWs();
      if (Consume(",")) continue;
      if (Consume("}")) return Value::MakeObject(std::move(obj));
      return Error("expected ',' or '}'");
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

void DumpString(std::string_view s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  size_t pos = 0;
  while (pos < s.size()) {
    uint32_t cp = DecodeUtf8(s, pos);
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20) {
      out += absl::StrFormat("\\u%04x", cp);
    } else if (cp >= 0x80 && ensure_ascii) {
      if (cp >= 0x10000) {
        uint32_t v = cp - 0x10000;
        out += absl::StrFormat("\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += absl::StrFormat("\\u%04x", cp);
      }
    } else {
      AppendUtf8(out, cp);
    }
  }
  out.push_back('"');
}

absl::Status Dump(const Value& v, const JsonDumpOptions& o, int level, std::string& out) {
  if (level > 512) return absl::InvalidArgumentError("tojson: nesting too deep");
  const std::string item_sep = o.item_separator.value_or(o.indent.has_value() ? "," : ", ");
  const std::string key_sep = o.key_separator.value_or(": ");
  auto newline = [&](int lvl) {
    if (!o.indent.has_value()) return;
    out.push_back('\n');
    out.append(static_cast<size_t>(std::max(0, *o.indent)) * lvl, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d > 0 ? "Infinity" : "-Infinity";
      else
        out += PyFloatRepr(d);
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      DumpString(v.str(), o.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kArray: {
      const Array& a = v.array();
      if (a.empty()) {
        out += "[]";
        return absl::OkStatus();
      }
      out.push_back('[');
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        if (auto s = Dump(a[i], o, level + 1, out); !s.ok()) return s;
      }
      newline(level);
      out.push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kObject: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.object().items()) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return absl::OkStatus();
      }
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        DumpString(items[i]->first, o.ensure_ascii, out);
        out += key_sep;
        if (auto s = Dump(items[i]->second, o, level + 1, out); !s.ok()) return s;
      }
      newline(level);
      out.push_back('}');
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("Object of type %s is not JSON serializable", v.TypeName()));
  }
}

}  // namespace

absl::StatusOr<Value> ParseJson(std::string_view text) { return JsonParser(text).ParseDocument(); }

absl::StatusOr<std::string> DumpJson(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  if (auto s = Dump(value, options, 0, out); !s.ok()) return s;
  return out;
}

}  // namespace stepserve::jinja
