#include "engine/tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace stepserve::jinja::internal {
namespace {

absl::Status TypeError(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// Bounds every string the template builds so a loop of `x ~ x` cannot exhaust memory.
constexpr size_t kMaxString = 64u << 20;

const Value* Arg(const CallArgs& a, size_t i, std::string_view name) {
  if (i < a.positional.size()) return &a.positional[i];
  for (const auto& [k, v] : a.keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::u32string ToU32(std::string_view s) {
  std::u32string out;
  size_t pos = 0;
  while (pos < s.size()) out.push_back(DecodeUtf8(s, pos));
  return out;
}

std::string FromU32(const std::u32string& s, size_t b, size_t e) {
  std::string out;
  for (size_t i = b; i < e; ++i) AppendUtf8(out, s[i]);
  return out;
}

std::string Strip(std::string_view s, const Value* chars, bool left, bool right) {
  std::u32string u = ToU32(s);
  std::u32string set;
  bool ws = chars == nullptr || chars->is_none();
  if (!ws) set = ToU32(chars->str());
  auto strip_it = [&](char32_t c) {
    return ws ? IsPySpace(c) : set.find(c) != std::u32string::npos;
  };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return FromU32(u, b, e);
}

absl::StatusOr<Value> Split(const std::string& s, const Value* sep, const Value* maxsplit_v) {
  int64_t maxsplit = maxsplit_v ? maxsplit_v->as_int() : -1;
  Array out;
  if (sep == nullptr || sep->is_none()) {
    std::u32string u = ToU32(s);
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && IsPySpace(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = u.size();
        while (e > i && IsPySpace(u[e - 1])) --e;
        out.push_back(Value::String(FromU32(u, i, e)));
        break;
      }
      size_t j = i;
      while (j < u.size() && !IsPySpace(u[j])) ++j;
      out.push_back(Value::String(FromU32(u, i, j)));
      i = j;
    }
    return Value::MakeArray(std::move(out));
  }
  if (!sep->is_string()) return TypeError("must be str or None, not " + sep->TypeName());
  const std::string& d = sep->str();
  if (d.empty()) return TypeError("empty separator");
  size_t start = 0;
  while (true) {
    size_t f = s.find(d, start);
    if (f == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit)) {
      out.push_back(Value::String(s.substr(start)));
      break;
    }
    out.push_back(Value::String(s.substr(start, f - start)));
    start = f + d.size();
  }
  return Value::MakeArray(std::move(out));
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every code point
    std::vector<size_t> offs = CodePointOffsets(s);
    for (size_t i = 0; i + 1 < offs.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += to;
      out += s.substr(offs[i], offs[i + 1] - offs[i]);
    }
    if (count < 0 || static_cast<int64_t>(offs.size()) - 1 < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(from, start);
    if (f == std::string::npos) break;
    out += s.substr(start, f - start) + to;
    start = f + from.size();
    ++n;
  }
  return out + s.substr(start);
}

std::string AsciiCase(std::string s, bool upper) {
  for (char& c : s)
    c = upper ? toupper(static_cast<unsigned char>(c)) : tolower(static_cast<unsigned char>(c));
  return s;
}

std::string Title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    bool alpha = isalpha(static_cast<unsigned char>(c));
    if (alpha)
      c = prev_cased ? tolower(static_cast<unsigned char>(c))
                     : toupper(static_cast<unsigned char>(c));
    prev_cased = alpha;
  }
  return out;
}

std::string Capitalize(const std::string& s) {
  std::string out = AsciiCase(s, false);
  if (!out.empty()) out[0] = toupper(static_cast<unsigned char>(out[0]));
  return out;
}

absl::StatusOr<Value> StringMethod(const std::string& s, const std::string& name,
                                   const CallArgs& a) {
  const Value* a0 = Arg(a, 0, "");
  auto need_str = [&](const Value* v) -> absl::Status {
    if (v == nullptr || !v->is_string()) {
      return TypeError(absl::StrFormat("str.%s() argument must be str", name));
    }
    return absl::OkStatus();
  };
  if (name == "startswith" || name == "endswith") {
    if (a0 == nullptr) return TypeError(name + "() takes at least 1 argument");
    std::vector<std::string> options;
    if (a0->is_array()) {
      for (const Value& v : a0->array()) {
        if (!v.is_string()) return TypeError("tuple for " + name + " must only contain str");
        options.push_back(v.str());
      }
    } else {
      if (auto st = need_str(a0); !st.ok()) return st;
      options.push_back(a0->str());
    }
    for (const std::string& o : options) {
      bool hit = name == "startswith"
                     ? s.compare(0, o.size(), o) == 0 && s.size() >= o.size()
                     : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    if (a0 != nullptr && !a0->is_none()) {
      if (auto st = need_str(a0); !st.ok()) return st;
    }
    return Value::String(Strip(s, a0, name != "rstrip", name != "lstrip"));
  }
  if (name == "split") return Split(s, Arg(a, 0, "sep"), Arg(a, 1, "maxsplit"));
  if (name == "replace") {
    const Value* a1 = Arg(a, 1, "");
    if (auto st = need_str(a0); !st.ok()) return st;
    if (auto st = need_str(a1); !st.ok()) return st;
    const Value* c = Arg(a, 2, "count");
    std::string r = Replace(s, a0->str(), a1->str(), c ? c->as_int() : -1);
    if (r.size() > kMaxString) return absl::ResourceExhaustedError("string too long");
    return Value::String(std::move(r));
  }
  if (name == "upper" || name == "lower") return Value::String(AsciiCase(s, name == "upper"));
  if (name == "title") return Value::String(Title(s));
  if (name == "capitalize") return Value::String(Capitalize(s));
  if (name == "find" || name == "count" || name == "rfind" || name == "index") {
    if (auto st = need_str(a0); !st.ok()) return st;
    if (name == "count") {
      if (a0->str().empty()) return Value::Int(CodePointOffsets(s).size());
      int64_t n = 0;
      for (size_t p = s.find(a0->str()); p != std::string::npos;
           p = s.find(a0->str(), p + a0->str().size())) {
        ++n;
      }
      return Value::Int(n);
    }
    size_t f = name == "rfind" ? s.rfind(a0->str()) : s.find(a0->str());
    if (f == std::string::npos) {
      if (name == "index") return TypeError("substring not found");
      return Value::Int(-1);
    }
    std::vector<size_t> offs = CodePointOffsets(s);
    return Value::Int(std::lower_bound(offs.begin(), offs.end(), f) - offs.begin());
  }
  if (name == "join") {
    if (a0 == nullptr) return TypeError("join() takes exactly one argument");
    auto items = Iterate(*a0);
    if (!items.ok()) return items.status();
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      if (!(*items)[i].is_string()) return TypeError("sequence item: expected str instance");
      if (i) out += s;
      out += (*items)[i].str();
    }
    return Value::String(std::move(out));
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha") {
    if (s.empty()) return Value::Bool(false);
    for (char c : s) {
      unsigned char u = static_cast<unsigned char>(c);
      bool ok = name == "isdigit" ? isdigit(u) : name == "isspace" ? isspace(u) : isalpha(u);
      if (!ok) return Value::Bool(false);
    }
    return Value::Bool(true);
  }
  return TypeError(absl::StrFormat("'str object' has no attribute '%s'", name));
}

bool IsStringMethod(const std::string& n) {
  static const char* const kNames[] = {"startswith", "endswith", "strip",   "lstrip", "rstrip",
                                       "split",      "replace",  "upper",   "lower",  "title",
                                       "capitalize", "find",     "rfind",   "index",  "count",
                                       "join",       "isdigit",  "isspace", "isalpha"};
  for (const char* k : kNames) {
    if (n == k) return true;
  }
  return false;
}

Value Bound(std::string name, NativeFunction fn) {
  return Value::Function(std::move(name), std::move(fn));
}

absl::Status Unsafe(const std::string& name, const Value& obj) {
  return absl::PermissionDeniedError(
      absl::StrFormat("access to attribute '%s' of '%s' object is unsafe.", name, obj.TypeName()));
}

}  // namespace

absl::Status UndefinedError(const Value& u) {
  return absl::InvalidArgumentError(u.str().empty() ? "value is undefined" : u.str());
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_string()) {
    if (!IsStringMethod(name))
      return Value::Undefined("'str object' has no attribute '" + name + "'");
    std::string s = obj.str();
    return Bound(name, [s, name](const CallArgs& a) { return StringMethod(s, name, a); });
  }
  if (obj.is_object()) {
    if (name == "items" || name == "keys" || name == "values") {
      Value o = obj;
      return Bound(name, [o, name](const CallArgs&) -> absl::StatusOr<Value> {
        Array out;
        for (const auto& [k, v] : o.object().items()) {
          if (name == "keys")
            out.push_back(Value::String(k));
          else if (name == "values")
            out.push_back(v);
          else
            out.push_back(Value::MakeArray({Value::String(k), v}));
        }
        return Value::MakeArray(std::move(out));
      });
    }
    if (name == "get") {
      Value o = obj;
      return Bound(name, [o](const CallArgs& a) -> absl::StatusOr<Value> {
        const Value* k = Arg(a, 0, "key");
        if (k == nullptr) return TypeError("get expected at least 1 argument");
        const Value* d = Arg(a, 1, "default");
        if (k->is_string()) {
          if (const Value* v = o.object().Find(k->str())) return *v;
        }
        return d ? *d : Value::None();
      });
    }
    if (name == "pop" || name == "update" || name == "setdefault" || name == "clear" ||
        name == "popitem") {
      return Unsafe(name, obj);
    }
    if (const Value* v = obj.object().Find(name)) return *v;
    return Value::Undefined("'dict object' has no attribute '" + name + "'");
  }
  if (obj.is_namespace()) {
    if (const Value* v = obj.object().Find(name)) return *v;
    return Value::Undefined("'Namespace' has no attribute '" + name + "'");
  }
  if (obj.is_array()) {
    if (name == "append" || name == "pop" || name == "extend" || name == "insert" ||
        name == "remove" || name == "clear" || name == "sort" || name == "reverse") {
      return Unsafe(name, obj);
    }
  }
  return Value::Undefined(
      absl::StrFormat("'%s object' has no attribute '%s'", obj.TypeName(), name));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if ((obj.is_array() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_array()) {
      int64_t n = obj.array().size();
      if (i < 0) i += n;
      if (i < 0 || i >= n)
        return Value::Undefined(absl::StrFormat("list object has no element %d", key.as_int()));
      return obj.array()[i];
    }
    std::vector<size_t> offs = CodePointOffsets(obj.str());
    int64_t n = offs.size() - 1;
    if (i < 0) i += n;
    if (i < 0 || i >= n)
      return Value::Undefined(absl::StrFormat("str object has no element %d", key.as_int()));
    return Value::String(obj.str().substr(offs[i], offs[i + 1] - offs[i]));
  }
  if ((obj.is_object() || obj.is_namespace()) && key.is_string()) {
    if (const Value* v = obj.object().Find(key.str())) return *v;
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value::Undefined(
      absl::StrFormat("'%s object' has no attribute '%s'", obj.TypeName(), key.PyStr()));
}

absl::StatusOr<Value> SliceValue(const Value& obj, const std::optional<int64_t>& start,
                                 const std::optional<int64_t>& stop,
                                 const std::optional<int64_t>& step_opt) {
  if (obj.is_undefined()) return UndefinedError(obj);
  int64_t step = step_opt.value_or(1);
  if (step == 0) return TypeError("slice step cannot be zero");
  std::vector<size_t> offs;
  int64_t n;
  if (obj.is_array()) {
    n = obj.array().size();
  } else if (obj.is_string()) {
    offs = CodePointOffsets(obj.str());
    n = offs.size() - 1;
  } else {
    return TypeError(absl::StrFormat("'%s' object is not subscriptable", obj.TypeName()));
  }
  auto clamp = [&](std::optional<int64_t> v, int64_t def) -> int64_t {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t b = clamp(start, step > 0 ? 0 : n - 1);
  int64_t e = clamp(stop, step > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) idx.push_back(i);
  if (obj.is_array()) {
    Array out;
    for (int64_t i : idx) out.push_back(obj.array()[i]);
    return Value::MakeArray(std::move(out));
  }
  std::string out;
  for (int64_t i : idx) out += obj.str().substr(offs[i], offs[i + 1] - offs[i]);
  return Value::String(std::move(out));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  std::vector<Value> out;
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return out;
    case Value::Kind::kArray:
      return v.array();
    case Value::Kind::kObject:
      for (const auto& [k, _] : v.object().items()) out.push_back(Value::String(k));
      return out;
    case Value::Kind::kString: {
      std::vector<size_t> offs = CodePointOffsets(v.str());
      for (size_t i = 0; i + 1 < offs.size(); ++i) {
        out.push_back(Value::String(v.str().substr(offs[i], offs[i + 1] - offs[i])));
      }
      return out;
    }
    default:
      return TypeError(absl::StrFormat("'%s' object is not iterable", v.TypeName()));
  }
}

absl::StatusOr<bool> Contains(const Value& c, const Value& item) {
  if (c.is_string()) {
    if (!item.is_string()) {
      return TypeError("'in <string>' requires string as left operand, not " + item.TypeName());
    }
    return c.str().find(item.str()) != std::string::npos;
  }
  if (c.is_object()) return item.is_string() && c.object().Find(item.str()) != nullptr;
  if (c.is_array()) {
    for (const Value& v : c.array()) {
      if (v.Equals(item)) return true;
    }
    return false;
  }
  if (c.is_undefined()) return false;
  return TypeError(absl::StrFormat("argument of type '%s' is not iterable", c.TypeName()));
}

namespace {

absl::StatusOr<int> Compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    double x = a.as_double(), y = b.as_double();
    if (!a.is_float() && !b.is_float())
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str() ? -1 : a.str() > b.str();
  if (a.is_array() && b.is_array()) {
    size_t n = std::min(a.array().size(), b.array().size());
    for (size_t i = 0; i < n; ++i) {
      if (!a.array()[i].Equals(b.array()[i])) return Compare(a.array()[i], b.array()[i], op);
    }
    return a.array().size() < b.array().size() ? -1 : a.array().size() > b.array().size();
  }
  return TypeError(absl::StrFormat("'%s' not supported between instances of '%s' and '%s'", op,
                                   a.TypeName(), b.TypeName()));
}

Value NumberResult(double d, bool is_float, int64_t i) {
  return is_float ? Value::Float(d) : Value::Int(i);
}

}  // namespace

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return Value::Bool(a.Equals(b));
  if (op == "!=") return Value::Bool(!a.Equals(b));
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    if (a.is_undefined()) return UndefinedError(a);
    if (b.is_undefined()) return UndefinedError(b);
    auto c = Compare(a, b, op);
    if (!c.ok()) return c.status();
    bool r = op == "<" ? *c < 0 : op == "<=" ? *c <= 0 : op == ">" ? *c > 0 : *c >= 0;
    return Value::Bool(r);
  }
  if (op == "in" || op == "not in") {
    if (b.is_undefined() && !b.str().empty()) return UndefinedError(b);
    auto r = Contains(b, a);
    if (!r.ok()) return r.status();
    return Value::Bool(op == "in" ? *r : !*r);
  }
  if (op == "~") {
    std::string s = a.PyStr() + b.PyStr();
    if (s.size() > kMaxString) return absl::ResourceExhaustedError("string too long");
    return Value::String(std::move(s));
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.str().size() + b.str().size() > kMaxString)
        return absl::ResourceExhaustedError("string too long");
      // markupsafe: Markup + str escapes the str operand.
      if (a.is_safe() != b.is_safe()) {
        return Value::String(
            a.is_safe() ? a.str() + HtmlEscape(b.str()) : HtmlEscape(a.str()) + b.str(), true);
      }
      return Value::String(a.str() + b.str(), a.is_safe());
    }
    if (a.is_array() && b.is_array()) {
      Array out = a.array();
      out.insert(out.end(), b.array().begin(), b.array().end());
      return Value::MakeArray(std::move(out));
    }
  }
  if (op == "*" && ((a.is_string() || a.is_array()) && (b.is_int() || b.is_bool()))) {
    int64_t n = std::max<int64_t>(0, b.as_int());
    size_t unit = a.is_string() ? a.str().size() : a.array().size();
    if (unit != 0 && static_cast<uint64_t>(n) > kMaxString / unit)
      return absl::ResourceExhaustedError("repetition too large");
    if (a.is_string()) {
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += a.str();
      return Value::String(std::move(out));
    }
    Array out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), a.array().begin(), a.array().end());
    return Value::MakeArray(std::move(out));
  }
  if (a.is_number() && b.is_number()) {
    bool f = a.is_float() || b.is_float();
    double x = a.as_double(), y = b.as_double();
    int64_t i = a.as_int(), j = b.as_int();
    if (op == "+") return NumberResult(x + y, f, i + j);
    if (op == "-") return NumberResult(x - y, f, i - j);
    if (op == "*") return NumberResult(x * y, f, i * j);
    if (op == "/") {
      if (y == 0) return TypeError("division by zero");
      return Value::Float(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0)
        return TypeError(op == "%" ? "modulo by zero" : "integer division or modulo by zero");
      if (f) {
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::Float(op == "%" ? m : std::floor((x - m) / y + 0.5));
      }
      int64_t q = i / j, r = i % j;
      if (r != 0 && ((r < 0) != (j < 0))) {
        --q;
        r += j;
      }
      return Value::Int(op == "%" ? r : q);
    }
    if (op == "**") {
      if (!f && j >= 0) {
        double p = std::pow(x, y);
        if (std::fabs(p) < 9.2e18) return Value::Int(static_cast<int64_t>(std::llround(p)));
        return TypeError("integer power too large");
      }
      return Value::Float(std::pow(x, y));
    }
  }
  return TypeError(absl::StrFormat("unsupported operand type(s) for %s: '%s' and '%s'", op,
                                   a.TypeName(), b.TypeName()));
}

}  // namespace stepserve::jinja::internal
