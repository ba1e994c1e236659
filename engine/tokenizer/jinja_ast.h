// Syntax tree of a parsed Jinja template. Plain structs owned by unique_ptr; the parser builds
// them, the interpreter walks them. Every node carries its source position for error messages.
#ifndef STEPSERVE_ENGINE_TOKENIZER_JINJA_AST_H_
#define STEPSERVE_ENGINE_TOKENIZER_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/jinja_value.h"

namespace stepserve::jinja {

struct Pos {
  int line = 1;
  int column = 1;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // children = items
    kTuple,     // children = items
    kDict,      // children = key0, value0, key1, value1, ...
    kGetAttr,   // children[0] . name
    kGetItem,   // children[0] [ children[1] ]
    kSlice,     // children[0] [ children[1] : children[2] : children[3] ] (null = omitted)
    kCall,      // children[0] ( children[1..], kwargs )
    kFilter,    // children[0] | name ( children[1..], kwargs )
    kTest,      // children[0] is [not] name ( children[1..], kwargs )
    kUnary,     // name in {"-", "+", "not"} children[0]
    kBinary,    // name = operator, children[0], children[1]
    kCondExpr,  // children[0] if children[1] else children[2] (children[2] may be null)
  };
  Kind kind = Kind::kLiteral;
  Pos pos;
  Value value;
  std::string name;
  bool negated = false;  // `is not`
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,       // text
    kOutput,     // {{ expr }}
    kIf,         // branches (cond, body); else_body
    kFor,        // targets in expr [if filter]; body; else_body
    kSet,        // targets (or target + attr) = expr; or block set (expr null, body)
    kMacro,      // name(params) body
    kCallBlock,  // {% call(params) expr %} body {% endcall %}
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  Pos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;                                  // for-loop `if`
  std::vector<std::string> targets;                // for / set names (tuple unpacking)
  std::string attr;                                // set ns.attr
  std::vector<std::pair<ExprPtr, Body>> branches;  // if / elif
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro / call-block parameters
};

struct Template {
  Body body;
};

}  // namespace stepserve::jinja

#endif  // STEPSERVE_ENGINE_TOKENIZER_JINJA_AST_H_
