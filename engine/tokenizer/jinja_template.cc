#include "engine/tokenizer/jinja_template.h"

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/jinja_builtins.h"
#include "engine/tokenizer/jinja_parser.h"

namespace stepserve::jinja {
namespace {

using internal::UndefinedError;

// Adds the failing expression's position unless an inner expression already did.
absl::Status Positioned(const absl::Status& s, const Pos& pos) {
  if (s.ok() || absl::StartsWith(s.message(), "template line")) return s;
  return absl::Status(s.code(), absl::StrFormat("template line %d, column %d: %s", pos.line,
                                                pos.column, std::string(s.message())));
}

struct Frame {
  Object vars;
  std::shared_ptr<Frame> parent;
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const Object& context, const RenderOptions& options)
      : context_(context), options_(options) {}

  absl::Status Run(const Body& body, std::string& out) {
    auto root = std::make_shared<Frame>();
    auto flow = Exec(body, root, out);
    return flow.status();
  }

 private:
  const Value* Lookup(const FramePtr& frame, const std::string& name) {
    for (Frame* f = frame.get(); f != nullptr; f = f->parent.get()) {
      if (const Value* v = f->vars.Find(name)) return v;
    }
    return context_.Find(name);
  }

  absl::StatusOr<Flow> Exec(const Body& body, const FramePtr& frame, std::string& out) {
    for (const NodePtr& n : body) {
      auto flow = ExecNode(*n, frame, out);
      if (!flow.ok() || *flow != Flow::kNormal) return flow;
      if (out.size() > options_.max_output_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrFormat("template output exceeds %d bytes", options_.max_output_bytes));
      }
    }
    return Flow::kNormal;
  }

  absl::Status Assign(const Node& n, const FramePtr& frame, Value v) {
    if (!n.attr.empty()) {
      const Value* ns = Lookup(frame, n.targets[0]);
      if (ns == nullptr || !ns->is_namespace()) {
        return ErrorAt(n.pos, "cannot assign attribute on non-namespace object");
      }
      Value copy = *ns;  // shares the namespace's storage
      copy.mutable_object().Set(n.attr, std::move(v));
      return absl::OkStatus();
    }
    if (n.targets.size() == 1) {
      frame->vars.Set(n.targets[0], std::move(v));
      return absl::OkStatus();
    }
    auto items = internal::Iterate(v);
    if (!items.ok()) return Positioned(items.status(), n.pos);
    if (items->size() != n.targets.size()) {
      return ErrorAt(n.pos, absl::StrFormat("cannot unpack %d values into %d names", items->size(),
                                            n.targets.size()));
    }
    for (size_t i = 0; i < items->size(); ++i) frame->vars.Set(n.targets[i], (*items)[i]);
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> ExecNode(const Node& n, const FramePtr& frame, std::string& out) {
    switch (n.kind) {
      case Node::Kind::kText:
        out += n.text;
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        auto v = Eval(*n.expr, frame);
        if (!v.ok()) return v.status();
        out += v->PyStr();
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          auto c = Eval(*cond, frame);
          if (!c.ok()) return c.status();
          if (c->Truthy()) return Exec(body, frame, out);
        }
        return Exec(n.else_body, frame, out);
      case Node::Kind::kFor:
        return ExecFor(n, frame, out);
      case Node::Kind::kSet: {
        Value v;
        if (n.expr) {
          auto e = Eval(*n.expr, frame);
          if (!e.ok()) return e.status();
          v = *std::move(e);
        } else {
          std::string captured;
          auto f = Exec(n.body, frame, captured);
          if (!f.ok()) return f.status();
          v = Value::String(std::move(captured));
        }
        if (auto s = Assign(n, frame, std::move(v)); !s.ok()) return s;
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        frame->vars.Set(n.text, MakeMacro(n, frame, Value()));
        return Flow::kNormal;
      case Node::Kind::kCallBlock: {
        Value caller = MakeMacro(n, frame, Value());
        auto v = EvalCall(*n.expr, frame, &caller);
        if (!v.ok()) return v.status();
        out += v->PyStr();
        return Flow::kNormal;
      }
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecFor(const Node& n, const FramePtr& frame, std::string& out) {
    auto seq = Eval(*n.expr, frame);
    if (!seq.ok()) return seq.status();
    auto items = internal::Iterate(*seq);
    if (!items.ok()) return Positioned(items.status(), n.expr->pos);
    auto bind = [&](const FramePtr& f, const Value& item) -> absl::Status {
      if (n.targets.size() == 1) {
        f->vars.Set(n.targets[0], item);
        return absl::OkStatus();
      }
      auto parts = internal::Iterate(item);
      if (!parts.ok()) return Positioned(parts.status(), n.pos);
      if (parts->size() != n.targets.size()) {
        return ErrorAt(n.pos, absl::StrFormat("cannot unpack %d values into %d loop variables",
                                              parts->size(), n.targets.size()));
      }
      for (size_t i = 0; i < parts->size(); ++i) f->vars.Set(n.targets[i], (*parts)[i]);
      return absl::OkStatus();
    };
    std::vector<Value> kept;
    if (n.filter) {
      for (const Value& item : *items) {
        auto f = std::make_shared<Frame>();
        f->parent = frame;
        if (auto s = bind(f, item); !s.ok()) return s;
        auto c = Eval(*n.filter, f);
        if (!c.ok()) return c.status();
        if (c->Truthy()) kept.push_back(item);
      }
    } else {
      kept = *std::move(items);
    }
    if (kept.empty()) return Exec(n.else_body, frame, out);
    int64_t len = kept.size();
    for (int64_t i = 0; i < len; ++i) {
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      Object loop;
      loop.Set("index", Value::Int(i + 1));
      loop.Set("index0", Value::Int(i));
      loop.Set("revindex", Value::Int(len - i));
      loop.Set("revindex0", Value::Int(len - i - 1));
      loop.Set("first", Value::Bool(i == 0));
      loop.Set("last", Value::Bool(i == len - 1));
      loop.Set("length", Value::Int(len));
      loop.Set("depth", Value::Int(1));
      loop.Set("depth0", Value::Int(0));
      loop.Set("previtem", i > 0 ? kept[i - 1] : Value::Undefined("there is no previous item"));
      loop.Set("nextitem", i + 1 < len ? kept[i + 1] : Value::Undefined("there is no next item"));
      f->vars.Set("loop", Value::MakeObject(std::move(loop)));
      if (auto s = bind(f, kept[i]); !s.ok()) return s;
      auto flow = Exec(n.body, f, out);
      if (!flow.ok()) return flow;
      if (*flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value MakeMacro(const Node& n, const FramePtr& def_frame, Value) {
    const Node* node = &n;
    // The macro is stored in the frame it was defined in: a strong reference back to that frame
    // would be a cycle that leaks every frame of the render. The frame outlives every legal call.
    std::weak_ptr<Frame> def_weak = def_frame;
    return Value::Function(
        n.text, [this, node, def_weak](const CallArgs& args) -> absl::StatusOr<Value> {
          FramePtr def = def_weak.lock();
          if (def == nullptr) {
            return absl::FailedPreconditionError(
                absl::StrFormat("macro '%s' called after the scope defining it ended", node->text));
          }
          if (++depth_ > options_.max_call_depth) {
            --depth_;
            return absl::ResourceExhaustedError("macro recursion too deep");
          }
          auto f = std::make_shared<Frame>();
          f->parent = def;
          Array varargs;
          Object kwargs;
          for (size_t i = 0; i < args.positional.size(); ++i) {
            if (i < node->params.size())
              f->vars.Set(node->params[i].first, args.positional[i]);
            else
              varargs.push_back(args.positional[i]);
          }
          for (const auto& [k, v] : args.keyword) {
            bool is_param = false;
            for (const auto& p : node->params) is_param |= p.first == k;
            if (is_param)
              f->vars.Set(k, v);
            else if (k == "caller")
              f->vars.Set(k, v);
            else
              kwargs.Set(k, v);
          }
          absl::Status status;
          for (const auto& [pname, def] : node->params) {
            if (f->vars.Find(pname) != nullptr) continue;
            if (def) {
              auto d = Eval(*def, f);
              if (!d.ok()) {
                status = d.status();
                break;
              }
              f->vars.Set(pname, *d);
            } else {
              f->vars.Set(pname, Value::Undefined("parameter '" + pname + "' was not provided"));
            }
          }
          f->vars.Set("varargs", Value::MakeArray(std::move(varargs)));
          f->vars.Set("kwargs", Value::MakeObject(std::move(kwargs)));
          std::string out;
          if (status.ok()) status = Exec(node->body, f, out).status();
          --depth_;
          if (!status.ok()) return status;
          return Value::String(std::move(out));
        });
  }

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, const FramePtr& frame) {
    CallArgs args;
    for (size_t i = 1; i < e.children.size(); ++i) {
      auto v = Eval(*e.children[i], frame);
      if (!v.ok()) return v.status();
      args.positional.push_back(*std::move(v));
    }
    for (const auto& [k, ex] : e.kwargs) {
      auto v = Eval(*ex, frame);
      if (!v.ok()) return v.status();
      args.keyword.emplace_back(k, *std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> CallGlobal(const std::string& name, const CallArgs& args, bool* handled) {
    *handled = true;
    if (name == "raise_exception") {
      std::string msg = args.positional.empty() ? "" : args.positional[0].PyStr();
      return absl::InvalidArgumentError("raise_exception: " + msg);
    }
    if (name == "namespace") {
      Object o;
      for (const Value& p : args.positional) {
        if (!p.is_object()) return absl::InvalidArgumentError("namespace() takes a mapping");
        for (const auto& [k, v] : p.object().items()) o.Set(k, v);
      }
      for (const auto& [k, v] : args.keyword) o.Set(k, v);
      return Value::MakeNamespace(std::move(o));
    }
    if (name == "dict") {
      Object o;
      for (const auto& [k, v] : args.keyword) o.Set(k, v);
      return Value::MakeObject(std::move(o));
    }
    if (name == "range") {
      int64_t a = 0, b = 0, step = 1;
      for (const Value& p : args.positional) {
        if (!p.is_int()) return absl::InvalidArgumentError("range() arguments must be integers");
      }
      if (args.positional.size() == 1)
        b = args.positional[0].as_int();
      else if (args.positional.size() >= 2) {
        a = args.positional[0].as_int();
        b = args.positional[1].as_int();
        if (args.positional.size() == 3) step = args.positional[2].as_int();
      } else {
        return absl::InvalidArgumentError("range expected at least 1 argument");
      }
      if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
      Array out;
      for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
        if (out.size() >= 100000) return absl::ResourceExhaustedError("range() too large");
        out.push_back(Value::Int(i));
      }
      return Value::MakeArray(std::move(out));
    }
    if (name == "strftime_now") {
      if (args.positional.empty() || !args.positional[0].is_string()) {
        return absl::InvalidArgumentError("strftime_now() takes a format string");
      }
      std::time_t t = options_.now.value_or(std::time(nullptr));
      std::tm tm{};
      gmtime_r(&t, &tm);
      char buf[512];
      size_t n = std::strftime(buf, sizeof(buf), args.positional[0].str().c_str(), &tm);
      return Value::String(std::string(buf, n));
    }
    *handled = false;
    return Value();
  }

  absl::StatusOr<Value> EvalCall(const Expr& e, const FramePtr& frame, const Value* caller) {
    const Expr& callee = *e.children[0];
    auto args = EvalArgs(e, frame);
    if (!args.ok()) return args.status();
    if (caller != nullptr) args->keyword.emplace_back("caller", *caller);
    if (callee.kind == Expr::Kind::kName && Lookup(frame, callee.name) == nullptr) {
      bool handled = false;
      auto r = CallGlobal(callee.name, *args, &handled);
      if (handled) return Positioned(r.status(), e.pos).ok() ? r : Positioned(r.status(), e.pos);
    }
    auto fn = Eval(callee, frame);
    if (!fn.ok()) return fn;
    if (fn->is_undefined()) return Positioned(UndefinedError(*fn), e.pos);
    if (!fn->is_function()) {
      return ErrorAt(e.pos, absl::StrFormat("'%s' object is not callable", fn->TypeName()));
    }
    auto r = fn->function()(*args);
    if (!r.ok()) return Positioned(r.status(), e.pos);
    return r;
  }

  absl::StatusOr<std::optional<int64_t>> EvalIndex(const Expr* e, const FramePtr& frame) {
    if (e == nullptr) return std::optional<int64_t>();
    auto v = Eval(*e, frame);
    if (!v.ok()) return v.status();
    if (v->is_none()) return std::optional<int64_t>();
    if (!v->is_int() && !v->is_bool()) return ErrorAt(e->pos, "slice indices must be integers");
    return std::optional<int64_t>(v->as_int());
  }

  absl::StatusOr<Value> Eval(const Expr& e, const FramePtr& frame) {
    if (++eval_depth_ > 4 * options_.max_call_depth + 512) {
      --eval_depth_;
      return ErrorAt(e.pos, "evaluation nested too deeply");
    }
    auto r = EvalInner(e, frame);
    --eval_depth_;
    return r;
  }

  absl::StatusOr<Value> EvalInner(const Expr& e, const FramePtr& frame) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName: {
        if (const Value* v = Lookup(frame, e.name)) return *v;
        return Value::Undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        Array items;
        for (const ExprPtr& c : e.children) {
          auto v = Eval(*c, frame);
          if (!v.ok()) return v;
          items.push_back(*std::move(v));
        }
        return Value::MakeArray(std::move(items));
      }
      case Expr::Kind::kDict: {
        Object o;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          auto k = Eval(*e.children[i], frame);
          if (!k.ok()) return k;
          if (!k->is_string()) return ErrorAt(e.children[i]->pos, "dict keys must be strings");
          auto v = Eval(*e.children[i + 1], frame);
          if (!v.ok()) return v;
          o.Set(k->str(), *std::move(v));
        }
        return Value::MakeObject(std::move(o));
      }
      case Expr::Kind::kGetAttr: {
        auto obj = Eval(*e.children[0], frame);
        if (!obj.ok()) return obj;
        auto r = internal::GetAttr(*obj, e.name);
        return r.ok() ? r : Positioned(r.status(), e.pos);
      }
      case Expr::Kind::kGetItem: {
        auto obj = Eval(*e.children[0], frame);
        if (!obj.ok()) return obj;
        auto key = Eval(*e.children[1], frame);
        if (!key.ok()) return key;
        auto r = internal::GetItem(*obj, *key);
        return r.ok() ? r : Positioned(r.status(), e.pos);
      }
      case Expr::Kind::kSlice: {
        auto obj = Eval(*e.children[0], frame);
        if (!obj.ok()) return obj;
        auto a = EvalIndex(e.children[1].get(), frame);
        if (!a.ok()) return a.status();
        auto b = EvalIndex(e.children[2].get(), frame);
        if (!b.ok()) return b.status();
        auto c = EvalIndex(e.children[3].get(), frame);
        if (!c.ok()) return c.status();
        auto r = internal::SliceValue(*obj, *a, *b, *c);
        return r.ok() ? r : Positioned(r.status(), e.pos);
      }
      case Expr::Kind::kCall:
        return EvalCall(e, frame, nullptr);
      case Expr::Kind::kFilter:
      case Expr::Kind::kTest: {
        auto operand = Eval(*e.children[0], frame);
        if (!operand.ok()) return operand;
        auto args = EvalArgs(e, frame);
        if (!args.ok()) return args.status();
        if (e.kind == Expr::Kind::kFilter) {
          auto r = internal::ApplyFilter(e.name, *operand, *args);
          return r.ok() ? r : Positioned(r.status(), e.pos);
        }
        auto r = internal::ApplyTest(e.name, *operand, *args);
        if (!r.ok()) return Positioned(r.status(), e.pos);
        return Value::Bool(*r != e.negated);
      }
      case Expr::Kind::kUnary: {
        auto v = Eval(*e.children[0], frame);
        if (!v.ok()) return v;
        if (e.name == "not") return Value::Bool(!v->Truthy());
        if (!v->is_number()) {
          return ErrorAt(
              e.pos, absl::StrFormat("bad operand type for unary %s: '%s'", e.name, v->TypeName()));
        }
        if (e.name == "+") return v->is_float() ? *v : Value::Int(v->as_int());
        return v->is_float() ? Value::Float(-v->as_double()) : Value::Int(-v->as_int());
      }
      case Expr::Kind::kBinary: {
        auto a = Eval(*e.children[0], frame);
        if (!a.ok()) return a;
        if (e.name == "and") return a->Truthy() ? Eval(*e.children[1], frame) : a;
        if (e.name == "or") return a->Truthy() ? a : Eval(*e.children[1], frame);
        auto b = Eval(*e.children[1], frame);
        if (!b.ok()) return b;
        auto r = internal::BinaryOp(e.name, *a, *b);
        return r.ok() ? r : Positioned(r.status(), e.pos);
      }
      case Expr::Kind::kCondExpr: {
        auto c = Eval(*e.children[1], frame);
        if (!c.ok()) return c;
        if (c->Truthy()) return Eval(*e.children[0], frame);
        if (e.children[2]) return Eval(*e.children[2], frame);
        return Value::Undefined(
            "the inline if-expression evaluated to false and no else section "
            "was defined.");
      }
    }
    return ErrorAt(e.pos, "unknown expression");
  }

  const Object& context_;
  const RenderOptions& options_;
  int depth_ = 0;
  int eval_depth_ = 0;
};

}  // namespace

absl::StatusOr<JinjaTemplate> JinjaTemplate::Parse(std::string_view source,
                                                   const LexOptions& options) {
  auto t = ParseTemplate(source, options);
  if (!t.ok()) return t.status();
  return JinjaTemplate(std::shared_ptr<const Template>(*std::move(t)));
}

absl::StatusOr<std::string> JinjaTemplate::Render(const Object& context,
                                                  const RenderOptions& options) const {
  std::string out;
  Interpreter interp(context, options);
  if (auto s = interp.Run(tmpl_->body, out); !s.ok()) return s;
  return out;
}

}  // namespace stepserve::jinja
