#include "engine/tokenizer/jinja_parser.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace stepserve::jinja {
namespace {

constexpr int kMaxDepth = 200;

using TT = Token::Type;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  absl::StatusOr<std::unique_ptr<Template>> Run() {
    auto tmpl = std::make_unique<Template>();
    std::string end;
    if (auto s = ParseBody({}, tmpl->body, end); !s.ok()) return s;
    return tmpl;
  }

 private:
  const Token& Cur() const { return toks_[i_]; }
  const Token& Peek(size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  void Next() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool IsOp(std::string_view op) const { return Cur().type == TT::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const { return Cur().type == TT::kName && Cur().text == n; }
  absl::Status Unexpected(std::string_view expected) const {
    std::string got = Cur().type == TT::kEof        ? "end of template"
                      : Cur().type == TT::kBlockEnd ? "end of statement block"
                      : Cur().type == TT::kVarEnd   ? "end of print statement"
                                                    : "'" + Cur().text + "'";
    return ErrorAt(Cur().pos, absl::StrFormat("expected %s, got %s", expected, got));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!IsOp(op)) return Unexpected("'" + std::string(op) + "'");
    Next();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().type != TT::kBlockEnd) return Unexpected("end of statement block");
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != TT::kName) return Unexpected("a name");
    std::string n = Cur().text;
    Next();
    return n;
  }

  // Parses nodes until a block tag whose name is in `ends` (consumed: `{%` and the name) or EOF.
  absl::Status ParseBody(std::initializer_list<std::string_view> ends, Body& body,
                         std::string& end_found) {
    if (++depth_ > kMaxDepth) return ErrorAt(Cur().pos, "blocks nested too deeply");
    while (true) {
      const Token& t = Cur();
      if (t.type == TT::kEof) {
        --depth_;
        if (ends.size() == 0) return absl::OkStatus();
        std::string expected;
        for (std::string_view e : ends) {
          expected += (expected.empty() ? "'" : " or '") + std::string(e) + "'";
        }
        return ErrorAt(t.pos, absl::StrFormat("unexpected end of template, expected %s", expected));
      }
      if (t.type == TT::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->pos = t.pos;
        n->text = t.text;
        body.push_back(std::move(n));
        Next();
        continue;
      }
      if (t.type == TT::kVarBegin) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->pos = t.pos;
        Next();
        auto e = ParseTuple(true);
        if (!e.ok()) return e.status();
        n->expr = *std::move(e);
        if (Cur().type != TT::kVarEnd) return Unexpected("end of print statement");
        Next();
        body.push_back(std::move(n));
        continue;
      }
      if (t.type != TT::kBlockBegin) return Unexpected("template data or tag");
      Pos tag_pos = t.pos;
      Next();
      if (Cur().type != TT::kName) return Unexpected("statement name");
      std::string name = Cur().text;
      for (std::string_view e : ends) {
        if (name == e) {
          Next();
          end_found = name;
          --depth_;
          return absl::OkStatus();
        }
      }
      auto node = ParseStatement(name, tag_pos);
      if (!node.ok()) return node.status();
      body.push_back(*std::move(node));
    }
  }

  absl::StatusOr<NodePtr> ParseStatement(const std::string& name, Pos pos) {
    auto n = std::make_unique<Node>();
    n->pos = pos;
    Next();  // statement name
    std::string end;
    if (name == "if") {
      n->kind = Node::Kind::kIf;
      while (true) {
        auto cond = ParseTuple(true);
        if (!cond.ok()) return cond.status();
        if (auto s = ExpectBlockEnd(); !s.ok()) return s;
        Body body;
        if (auto s = ParseBody({"elif", "else", "endif"}, body, end); !s.ok()) return s;
        n->branches.emplace_back(*std::move(cond), std::move(body));
        if (end == "elif") continue;
        if (end == "else") {
          if (auto s = ExpectBlockEnd(); !s.ok()) return s;
          if (auto s = ParseBody({"endif"}, n->else_body, end); !s.ok()) return s;
        }
        break;
      }
    } else if (name == "for") {
      n->kind = Node::Kind::kFor;
      bool paren = IsOp("(");
      if (paren) Next();
      while (true) {
        auto t = ExpectName();
        if (!t.ok()) return t.status();
        n->targets.push_back(*t);
        if (!IsOp(",")) break;
        Next();
      }
      if (paren) {
        if (auto s = ExpectOp(")"); !s.ok()) return s;
      }
      if (!IsName("in")) return Unexpected("'in'");
      Next();
      auto iter = ParseTuple(false);
      if (!iter.ok()) return iter.status();
      n->expr = *std::move(iter);
      if (IsName("if")) {
        Next();
        auto f = ParseTuple(true);
        if (!f.ok()) return f.status();
        n->filter = *std::move(f);
      }
      if (IsName("recursive")) return ErrorAt(Cur().pos, "recursive for loops are not supported");
      if (auto s = ExpectBlockEnd(); !s.ok()) return s;
      if (auto s = ParseBody({"else", "endfor"}, n->body, end); !s.ok()) return s;
      if (end == "else") {
        if (auto s = ExpectBlockEnd(); !s.ok()) return s;
        if (auto s = ParseBody({"endfor"}, n->else_body, end); !s.ok()) return s;
      }
    } else if (name == "set") {
      n->kind = Node::Kind::kSet;
      auto t = ExpectName();
      if (!t.ok()) return t.status();
      n->targets.push_back(*t);
      if (IsOp(".")) {
        Next();
        auto a = ExpectName();
        if (!a.ok()) return a.status();
        n->attr = *a;
      } else {
        while (IsOp(",")) {
          Next();
          auto t2 = ExpectName();
          if (!t2.ok()) return t2.status();
          n->targets.push_back(*t2);
        }
      }
      if (IsOp("=")) {
        Next();
        auto e = ParseTuple(true);
        if (!e.ok()) return e.status();
        n->expr = *std::move(e);
      } else {
        if (Cur().type != TT::kBlockEnd) return Unexpected("'='");
        Next();
        if (auto s = ParseBody({"endset"}, n->body, end); !s.ok()) return s;
        return FinishEndTag(std::move(n));
      }
    } else if (name == "macro") {
      n->kind = Node::Kind::kMacro;
      auto m = ExpectName();
      if (!m.ok()) return m.status();
      n->text = *m;
      if (auto s = ParseParams(*n); !s.ok()) return s;
      if (auto s = ExpectBlockEnd(); !s.ok()) return s;
      if (auto s = ParseBody({"endmacro"}, n->body, end); !s.ok()) return s;
      if (Cur().type == TT::kName && Cur().text == n->text) Next();
    } else if (name == "call") {
      n->kind = Node::Kind::kCallBlock;
      if (IsOp("(")) {
        if (auto s = ParseParams(*n); !s.ok()) return s;
      }
      auto e = ParseExpression(true);
      if (!e.ok()) return e.status();
      if ((*e)->kind != Expr::Kind::kCall) return ErrorAt(pos, "expected a call after 'call'");
      n->expr = *std::move(e);
      if (auto s = ExpectBlockEnd(); !s.ok()) return s;
      if (auto s = ParseBody({"endcall"}, n->body, end); !s.ok()) return s;
    } else if (name == "break" || name == "continue") {
      if (loop_depth_hint_ < 0) return ErrorAt(pos, "break outside loop");
      n->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
    } else {
      return ErrorAt(pos, absl::StrFormat("unknown or unsupported tag '%s'", name));
    }
    return FinishEndTag(std::move(n));
  }

  absl::StatusOr<NodePtr> FinishEndTag(NodePtr n) {
    if (auto s = ExpectBlockEnd(); !s.ok()) return s;
    return n;
  }

  absl::Status ParseParams(Node& n) {
    if (auto s = ExpectOp("("); !s.ok()) return s;
    while (!IsOp(")")) {
      if (!n.params.empty()) {
        if (auto s = ExpectOp(","); !s.ok()) return s;
      }
      auto p = ExpectName();
      if (!p.ok()) return p.status();
      ExprPtr def;
      if (IsOp("=")) {
        Next();
        auto e = ParseExpression(true);
        if (!e.ok()) return e.status();
        def = *std::move(e);
      }
      n.params.emplace_back(*p, std::move(def));
    }
    Next();
    return absl::OkStatus();
  }

  // ---- expressions -----------------------------------------------------------------------

  ExprPtr Make(Expr::Kind kind, Pos pos, std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    e->name = std::move(name);
    return e;
  }

  struct DepthGuard {
    explicit DepthGuard(int& d) : d_(d) { ++d_; }
    ~DepthGuard() { --d_; }
    int& d_;
  };

  // Expression or bare tuple `a, b`.
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr) {
    Pos pos = Cur().pos;
    auto first = ParseExpression(with_condexpr);
    if (!first.ok() || !IsOp(",")) return first;
    auto tuple = Make(Expr::Kind::kTuple, pos);
    tuple->children.push_back(*std::move(first));
    while (IsOp(",")) {
      Next();
      if (Cur().type == TT::kBlockEnd || Cur().type == TT::kVarEnd) break;
      auto e = ParseExpression(with_condexpr);
      if (!e.ok()) return e;
      tuple->children.push_back(*std::move(e));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    DepthGuard g(expr_depth_);
    if (expr_depth_ > kMaxDepth) return ErrorAt(Cur().pos, "expression nested too deeply");
    auto e = ParseOr();
    if (!e.ok() || !with_condexpr) return e;
    while (IsName("if")) {
      Pos pos = Cur().pos;
      Next();
      auto cond = ParseOr();
      if (!cond.ok()) return cond;
      auto node = Make(Expr::Kind::kCondExpr, pos);
      node->children.push_back(*std::move(e));
      node->children.push_back(*std::move(cond));
      if (IsName("else")) {
        Next();
        auto other = ParseExpression(true);
        if (!other.ok()) return other;
        node->children.push_back(*std::move(other));
      } else {
        node->children.push_back(nullptr);
      }
      e = std::move(node);
    }
    return e;
  }

  absl::StatusOr<ExprPtr> Binary(ExprPtr left, std::string op, Pos pos, ExprPtr right) {
    auto node = Make(Expr::Kind::kBinary, pos, std::move(op));
    node->children.push_back(std::move(left));
    node->children.push_back(std::move(right));
    return node;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    auto left = ParseAnd();
    while (left.ok() && IsName("or")) {
      Pos pos = Cur().pos;
      Next();
      auto right = ParseAnd();
      if (!right.ok()) return right;
      left = Binary(*std::move(left), "or", pos, *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    auto left = ParseNot();
    while (left.ok() && IsName("and")) {
      Pos pos = Cur().pos;
      Next();
      auto right = ParseNot();
      if (!right.ok()) return right;
      left = Binary(*std::move(left), "and", pos, *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      DepthGuard g(expr_depth_);
      if (expr_depth_ > kMaxDepth) return ErrorAt(Cur().pos, "expression nested too deeply");
      Pos pos = Cur().pos;
      Next();
      auto operand = ParseNot();
      if (!operand.ok()) return operand;
      auto node = Make(Expr::Kind::kUnary, pos, "not");
      node->children.push_back(*std::move(operand));
      return node;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    auto left = ParseMath1();
    while (left.ok()) {
      Pos pos = Cur().pos;
      std::string op;
      if (Cur().type == TT::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == TT::kName && Peek().text == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      auto right = ParseMath1();
      if (!right.ok()) return right;
      left = Binary(*std::move(left), op, pos, *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    auto left = ParseConcat();
    while (left.ok() && (IsOp("+") || IsOp("-"))) {
      std::string op = Cur().text;
      Pos pos = Cur().pos;
      Next();
      auto right = ParseConcat();
      if (!right.ok()) return right;
      left = Binary(*std::move(left), op, pos, *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    auto left = ParseMath2();
    while (left.ok() && IsOp("~")) {
      Pos pos = Cur().pos;
      Next();
      auto right = ParseMath2();
      if (!right.ok()) return right;
      left = Binary(*std::move(left), "~", pos, *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    auto left = ParsePow();
    while (left.ok() && (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%"))) {
      std::string op = Cur().text;
      Pos pos = Cur().pos;
      Next();
      auto right = ParsePow();
      if (!right.ok()) return right;
      left = Binary(*std::move(left), op, pos, *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    auto left = ParseUnary(true);
    while (left.ok() && IsOp("**")) {
      Pos pos = Cur().pos;
      Next();
      auto right = ParseUnary(true);
      if (!right.ok()) return right;
      left = Binary(*std::move(left), "**", pos, *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard g(expr_depth_);
    if (expr_depth_ > kMaxDepth) return ErrorAt(Cur().pos, "expression nested too deeply");
    absl::StatusOr<ExprPtr> node;
    if (IsOp("-") || IsOp("+")) {
      auto u = Make(Expr::Kind::kUnary, Cur().pos, Cur().text);
      Next();
      auto operand = ParseUnary(false);
      if (!operand.ok()) return operand;
      u->children.push_back(*std::move(operand));
      node = std::move(u);
    } else {
      node = ParsePrimary();
    }
    if (!node.ok()) return node;
    node = ParsePostfix(*std::move(node));
    if (!node.ok() || !with_filter) return node;
    return ParseFilterExpr(*std::move(node));
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    Pos pos = t.pos;
    if (t.type == TT::kName) {
      std::string n = t.text;
      Next();
      auto lit = Make(Expr::Kind::kLiteral, pos);
      if (n == "true" || n == "True")
        lit->value = Value::Bool(true);
      else if (n == "false" || n == "False")
        lit->value = Value::Bool(false);
      else if (n == "none" || n == "None")
        lit->value = Value::None();
      else
        return Make(Expr::Kind::kName, pos, n);
      return lit;
    }
    if (t.type == TT::kString) {
      std::string s;
      while (Cur().type == TT::kString) {  // adjacent literals concatenate
        s += Cur().text;
        Next();
      }
      auto lit = Make(Expr::Kind::kLiteral, pos);
      lit->value = Value::String(std::move(s));
      return lit;
    }
    if (t.type == TT::kInt || t.type == TT::kFloat) {
      auto lit = Make(Expr::Kind::kLiteral, pos);
      if (t.type == TT::kInt) {
        int64_t v = 0;
        auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec != std::errc()) return ErrorAt(pos, "integer literal out of range");
        lit->value = Value::Int(v);
      } else {
        lit->value = Value::Float(std::strtod(t.text.c_str(), nullptr));
      }
      Next();
      return lit;
    }
    if (IsOp("(")) {
      Next();
      if (IsOp(")")) {
        Next();
        return Make(Expr::Kind::kTuple, pos);
      }
      auto e = ParseTuple(true);
      if (!e.ok()) return e;
      if (auto s = ExpectOp(")"); !s.ok()) return s;
      return e;
    }
    if (IsOp("[") || IsOp("{")) {
      bool is_dict = IsOp("{");
      auto node = Make(is_dict ? Expr::Kind::kDict : Expr::Kind::kList, pos);
      Next();
      const char* close = is_dict ? "}" : "]";
      while (!IsOp(close)) {
        if (!node->children.empty()) {
          if (auto s = ExpectOp(","); !s.ok()) return s;
          if (IsOp(close)) break;
        }
        auto e = ParseExpression(true);
        if (!e.ok()) return e;
        node->children.push_back(*std::move(e));
        if (is_dict) {
          if (auto s = ExpectOp(":"); !s.ok()) return s;
          auto v = ParseExpression(true);
          if (!v.ok()) return v;
          node->children.push_back(*std::move(v));
        }
      }
      Next();
      return node;
    }
    return Unexpected("an expression");
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      Pos pos = Cur().pos;
      if (IsOp(".")) {
        Next();
        if (Cur().type == TT::kName) {
          auto a = Make(Expr::Kind::kGetAttr, pos, Cur().text);
          a->children.push_back(std::move(node));
          node = std::move(a);
          Next();
        } else if (Cur().type == TT::kInt) {
          auto a = Make(Expr::Kind::kGetItem, pos);
          auto idx = Make(Expr::Kind::kLiteral, pos);
          idx->value = Value::Int(std::atoll(Cur().text.c_str()));
          a->children.push_back(std::move(node));
          a->children.push_back(std::move(idx));
          node = std::move(a);
          Next();
        } else {
          return Unexpected("attribute name");
        }
      } else if (IsOp("[")) {
        Next();
        auto s = ParseSubscript(std::move(node), pos);
        if (!s.ok()) return s;
        node = *std::move(s);
      } else if (IsOp("(")) {
        auto c = ParseCall(std::move(node), Expr::Kind::kCall, "", pos);
        if (!c.ok()) return c;
        node = *std::move(c);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr obj, Pos pos) {
    ExprPtr parts[3];
    int n_colons = 0;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        if (++n_colons > 2) return Unexpected("']'");
        Next();
        continue;
      }
      if (parts[n_colons]) return Unexpected("':' or ']'");
      auto e = ParseExpression(true);
      if (!e.ok()) return e;
      parts[n_colons] = *std::move(e);
    }
    Next();
    if (n_colons == 0) {
      if (!parts[0]) return ErrorAt(pos, "empty subscript");
      auto node = Make(Expr::Kind::kGetItem, pos);
      node->children.push_back(std::move(obj));
      node->children.push_back(std::move(parts[0]));
      return node;
    }
    auto node = Make(Expr::Kind::kSlice, pos);
    node->children.push_back(std::move(obj));
    for (auto& p : parts) node->children.push_back(std::move(p));
    return node;
  }

  // Parses `( args )` into a call/filter/test node whose children[0] is `target`.
  absl::StatusOr<ExprPtr> ParseCall(ExprPtr target, Expr::Kind kind, std::string name, Pos pos) {
    auto node = Make(kind, pos, std::move(name));
    node->children.push_back(std::move(target));
    if (auto s = ExpectOp("("); !s.ok()) return s;
    bool first = true;
    while (!IsOp(")")) {
      if (!first) {
        if (auto s = ExpectOp(","); !s.ok()) return s;
        if (IsOp(")")) break;
      }
      first = false;
      if (Cur().type == TT::kName && Peek().type == TT::kOp && Peek().text == "=") {
        std::string key = Cur().text;
        Next();
        Next();
        auto v = ParseExpression(true);
        if (!v.ok()) return v;
        node->kwargs.emplace_back(key, *std::move(v));
      } else {
        if (!node->kwargs.empty()) return ErrorAt(Cur().pos, "positional argument after keyword");
        auto v = ParseExpression(true);
        if (!v.ok()) return v;
        node->children.push_back(*std::move(v));
      }
    }
    Next();
    return node;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      Pos pos = Cur().pos;
      if (IsOp("|")) {
        Next();
        auto name = ExpectName();
        if (!name.ok()) return name.status();
        while (IsOp(".")) {  // dotted filter names
          Next();
          auto more = ExpectName();
          if (!more.ok()) return more.status();
          *name += "." + *more;
        }
        if (IsOp("(")) {
          auto c = ParseCall(std::move(node), Expr::Kind::kFilter, *name, pos);
          if (!c.ok()) return c;
          node = *std::move(c);
        } else {
          auto f = Make(Expr::Kind::kFilter, pos, *name);
          f->children.push_back(std::move(node));
          node = std::move(f);
        }
      } else if (IsName("is")) {
        Next();
        bool negated = false;
        if (IsName("not")) {
          negated = true;
          Next();
        }
        auto name = ExpectName();
        if (!name.ok()) return name.status();
        ExprPtr test;
        if (IsOp("(")) {
          auto c = ParseCall(std::move(node), Expr::Kind::kTest, *name, pos);
          if (!c.ok()) return c;
          test = *std::move(c);
        } else {
          test = Make(Expr::Kind::kTest, pos, *name);
          test->children.push_back(std::move(node));
          const Token& t = Cur();
          bool arg_start = t.type == TT::kName || t.type == TT::kString || t.type == TT::kInt ||
                           t.type == TT::kFloat || IsOp("[") || IsOp("{");
          if (arg_start && !IsName("else") && !IsName("or") && !IsName("and")) {
            if (IsName("is")) return ErrorAt(t.pos, "you cannot chain multiple tests with is");
            auto arg = ParsePrimary();
            if (!arg.ok()) return arg;
            auto post = ParsePostfix(*std::move(arg));
            if (!post.ok()) return post;
            test->children.push_back(*std::move(post));
          }
        }
        test->negated = negated;
        node = std::move(test);
      } else if (IsOp("(")) {
        auto c = ParseCall(std::move(node), Expr::Kind::kCall, "", pos);
        if (!c.ok()) return c;
        node = *std::move(c);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int expr_depth_ = 0;
  int loop_depth_hint_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Template>> ParseTemplate(std::string_view source,
                                                        const LexOptions& options) {
  auto tokens = Lex(source, options);
  if (!tokens.ok()) return tokens.status();
  return Parser(*std::move(tokens)).Run();
}

}  // namespace stepserve::jinja
