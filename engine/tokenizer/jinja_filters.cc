// jinja2 filters and tests (ApplyFilter / ApplyTest), with HF's tojson (json.dumps,
// ensure_ascii=False by default, optional indent / separators / sort_keys).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/jinja_builtins.h"

namespace stepserve::jinja::internal {
namespace {

absl::Status Err(const std::string& msg) { return absl::InvalidArgumentError(msg); }

const Value* Arg(const CallArgs& a, size_t i, std::string_view name) {
  if (i < a.positional.size()) return &a.positional[i];
  for (const auto& [k, v] : a.keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

CallArgs Rest(const CallArgs& a, size_t from) {
  CallArgs r;
  for (size_t i = from; i < a.positional.size(); ++i) r.positional.push_back(a.positional[i]);
  r.keyword = a.keyword;
  return r;
}

absl::StatusOr<Value> ToJson(const Value& v, const CallArgs& a) {
  JsonDumpOptions o;
  if (const Value* x = Arg(a, 0, "ensure_ascii")) o.ensure_ascii = x->Truthy();
  if (const Value* x = Arg(a, 1, "indent"); x && !x->is_none()) {
    if (x->is_string()) return Err("tojson: string indent is not supported");
    o.indent = static_cast<int>(x->as_int());
  }
  if (const Value* x = Arg(a, 2, "separators"); x && !x->is_none()) {
    if (!x->is_array() || x->array().size() != 2 || !x->array()[0].is_string() ||
        !x->array()[1].is_string()) {
      return Err("tojson: separators must be a pair of strings");
    }
    o.item_separator = x->array()[0].str();
    o.key_separator = x->array()[1].str();
  }
  if (const Value* x = Arg(a, 3, "sort_keys")) o.sort_keys = x->Truthy();
  auto s = DumpJson(v, o);
  if (!s.ok()) return s.status();
  return Value::String(*std::move(s));
}

std::string Indent(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (start <= s.size()) {
    size_t nl = s.find('\n', start);
    std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!is_first) out += "\n";
    bool pad_it = is_first ? first : (blank || !line.empty());
    if (is_first && first && !blank && line.empty()) pad_it = false;
    if (pad_it) out += pad;
    out += line;
    is_first = false;
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

absl::StatusOr<Value> Select(const Value& v, const CallArgs& a, bool attr_mode, bool reject) {
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  size_t test_pos = attr_mode ? 1 : 0;
  const Value* attr = attr_mode ? Arg(a, 0, "attribute") : nullptr;
  if (attr_mode && (attr == nullptr || !attr->is_string())) return Err("missing attribute name");
  const Value* test = Arg(a, test_pos, "");
  Array out;
  for (const Value& item : *items) {
    Value x = item;
    if (attr_mode) {
      auto got = GetItem(item, *attr);
      if (!got.ok()) return got.status();
      x = *got;
    }
    bool ok;
    if (test == nullptr) {
      ok = x.Truthy();
    } else {
      if (!test->is_string()) return Err("test name must be a string");
      auto r = ApplyTest(test->str(), x, Rest(a, test_pos + 1));
      if (!r.ok()) return r.status();
      ok = *r;
    }
    if (ok != reject) out.push_back(item);
  }
  return Value::MakeArray(std::move(out));
}

absl::StatusOr<Value> ToInt(const Value& v, const CallArgs& a) {
  const Value* d = Arg(a, 0, "default");
  Value def = d ? *d : Value::Int(0);
  if (v.is_int() || v.is_bool()) return Value::Int(v.as_int());
  if (v.is_float()) return Value::Int(static_cast<int64_t>(v.as_double()));
  if (v.is_string()) {
    std::string s(v.str());
    char* end = nullptr;
    long long i = std::strtoll(s.c_str(), &end, 10);
    if (end != s.c_str() && *end == '\0') return Value::Int(i);
    double f = std::strtod(s.c_str(), &end);
    if (end != s.c_str() && *end == '\0' && std::isfinite(f))
      return Value::Int(static_cast<int64_t>(f));
  }
  return def;
}

}  // namespace

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const CallArgs& a) {
  if (name == "tojson") return ToJson(v, a);
  if (name == "safe") return Value::String(v.PyStr(), true);
  if (name == "string") return v.is_string() ? v : Value::String(v.PyStr());
  if (name == "trim") {
    if (v.is_undefined()) return Value::String("");
    CallArgs m;
    if (const Value* c = Arg(a, 0, "chars")) m.positional.push_back(*c);
    auto strip = GetAttr(Value::String(v.PyStr()), "strip");
    if (!strip.ok()) return strip.status();
    return strip->function()(m);
  }
  if (name == "length" || name == "count") {
    switch (v.kind()) {
      case Value::Kind::kUndefined:
        return Value::Int(0);
      case Value::Kind::kString:
        return Value::Int(CodePointOffsets(v.str()).size() - 1);
      case Value::Kind::kArray:
        return Value::Int(v.array().size());
      case Value::Kind::kObject:
        return Value::Int(v.object().size());
      default:
        return Err(absl::StrFormat("object of type '%s' has no len()", v.TypeName()));
    }
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::MakeArray();
    if (!v.is_object()) return Err("Can only get item pairs from a mapping.");
    auto m = GetAttr(v, "items");
    if (!m.ok()) return m.status();
    return m->function()(CallArgs{});
  }
  if (name == "list") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    return Value::MakeArray(*std::move(items));
  }
  if (name == "first" || name == "last") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value::Undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items->front() : items->back();
  }
  if (name == "join") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    const Value* sep = Arg(a, 0, "d");
    const Value* attr = Arg(a, 1, "attribute");
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      if (i) out += sep ? sep->PyStr() : "";
      Value x = (*items)[i];
      if (attr) {
        auto got = GetItem(x, *attr);
        if (!got.ok()) return got.status();
        x = *got;
      }
      out += x.PyStr();
    }
    return Value::String(std::move(out));
  }
  if (name == "default" || name == "d") {
    const Value* d = Arg(a, 0, "default_value");
    const Value* boolean = Arg(a, 1, "boolean");
    bool use_default = v.is_undefined() || (boolean && boolean->Truthy() && !v.Truthy());
    if (use_default) return d ? *d : Value::String("");
    return v;
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    auto m = GetAttr(Value::String(v.PyStr()), name);
    if (!m.ok()) return m.status();
    return m->function()(CallArgs{});
  }
  if (name == "replace") {
    auto m = GetAttr(Value::String(v.PyStr()), "replace");
    if (!m.ok()) return m.status();
    return m->function()(a);
  }
  if (name == "int") return ToInt(v, a);
  if (name == "float") {
    if (v.is_number()) return Value::Float(v.as_double());
    if (v.is_string()) {
      char* end = nullptr;
      double f = std::strtod(v.str().c_str(), &end);
      if (end != v.str().c_str() && *end == '\0') return Value::Float(f);
    }
    const Value* d = Arg(a, 0, "default");
    return d ? *d : Value::Float(0.0);
  }
  if (name == "abs") {
    if (v.is_float()) return Value::Float(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool()) return Value::Int(std::llabs(v.as_int()));
    return Err("bad operand type for abs(): '" + v.TypeName() + "'");
  }
  if (name == "indent") {
    const Value* w = Arg(a, 0, "width");
    std::string pad =
        w == nullptr ? "    "
        : w->is_string()
            ? w->str()
            : std::string(std::max<int64_t>(0, std::min<int64_t>(w->as_int(), 1 << 16)), ' ');
    const Value* first = Arg(a, 1, "first");
    const Value* blank = Arg(a, 2, "blank");
    return Value::String(
        Indent(v.PyStr(), pad, first && first->Truthy(), blank && blank->Truthy()));
  }
  if (name == "select") return Select(v, a, false, false);
  if (name == "reject") return Select(v, a, false, true);
  if (name == "selectattr") return Select(v, a, true, false);
  if (name == "rejectattr") return Select(v, a, true, true);
  if (name == "map") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    Array out;
    const Value* attr = nullptr;
    for (const auto& [k, val] : a.keyword) {
      if (k == "attribute") attr = &val;
    }
    const Value* filt = a.positional.empty() ? nullptr : &a.positional[0];
    for (const Value& item : *items) {
      if (attr) {
        auto got = GetItem(item, *attr);
        if (!got.ok()) return got.status();
        out.push_back(*got);
      } else if (filt && filt->is_string()) {
        auto r = ApplyFilter(filt->str(), item, Rest(a, 1));
        if (!r.ok()) return r.status();
        out.push_back(*r);
      } else {
        return Err("map requires a filter name or attribute=");
      }
    }
    return Value::MakeArray(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) return SliceValue(v, std::nullopt, std::nullopt, -1);
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    std::reverse(items->begin(), items->end());
    return Value::MakeArray(*std::move(items));
  }
  if (name == "unique") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    Array out;
    for (const Value& x : *items) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return y.Equals(x); }))
        out.push_back(x);
    }
    return Value::MakeArray(std::move(out));
  }
  if (name == "escape" || name == "e")
    return Value::String(v.is_safe() ? v.str() : HtmlEscape(v.PyStr()), true);
  return Err(absl::StrFormat("No filter named '%s'.", name));
}

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const CallArgs& a) {
  const Value* a0 = Arg(a, 0, "");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_string() || v.is_array() || v.is_object() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_array() || v.is_object() || v.is_undefined();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_function();
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    bool any = false;
    for (char c : v.str()) {
      if (isalpha(static_cast<unsigned char>(c))) {
        any = true;
        if (name == "lower" ? isupper(static_cast<unsigned char>(c))
                            : islower(static_cast<unsigned char>(c)))
          return false;
      }
    }
    return any;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) return Err("test '" + name + "' needs an integer");
    if (name == "divisibleby") {
      if (a0 == nullptr || !a0->is_int() || a0->as_int() == 0)
        return Err("divisibleby needs a nonzero integer");
      return v.as_int() % a0->as_int() == 0;
    }
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (a0 == nullptr && (name == "equalto" || name == "eq" || name == "==" || name == "in" ||
                        name == "sameas" || name == "ne" || name == "lt" || name == "gt")) {
    return Err("test '" + name + "' requires an argument");
  }
  if (name == "equalto" || name == "eq" || name == "==") return v.Equals(*a0);
  if (name == "ne" || name == "!=") return !v.Equals(*a0);
  if (name == "sameas") {
    if (v.is_bool() || v.is_none() || a0->is_bool() || a0->is_none()) {
      return v.kind() == a0->kind() && v.Equals(*a0);
    }
    return v.Equals(*a0) && v.kind() == a0->kind();
  }
  if (name == "in") return Contains(*a0, v);
  static const char* const kCmp[][2] = {{"lt", "<"},  {"le", "<="},      {"gt", ">"},
                                        {"ge", ">="}, {"lessthan", "<"}, {"greaterthan", ">"}};
  for (const auto& c : kCmp) {
    if (name == c[0]) {
      if (a0 == nullptr) return Err("test '" + name + "' requires an argument");
      auto r = BinaryOp(c[1], v, *a0);
      if (!r.ok()) return r.status();
      return r->as_bool();
    }
  }
  return Err(absl::StrFormat("No test named '%s'.", name));
}

}  // namespace stepserve::jinja::internal
