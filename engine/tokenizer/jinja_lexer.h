// Jinja lexer: splits template source into text and tag tokens, applying jinja2's whitespace
// rules (trim_blocks, lstrip_blocks, `-`/`+` modifiers, one trailing newline dropped as with
// keep_trailing_newline=False), and tokenizes expressions inside tags.
#ifndef STEPSERVE_ENGINE_TOKENIZER_JINJA_LEXER_H_
#define STEPSERVE_ENGINE_TOKENIZER_JINJA_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja_ast.h"

namespace stepserve::jinja {

struct Token {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Type type = Type::kEof;
  std::string text;  // text data, name, decoded string literal, operator, number spelling
  Pos pos;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& options);

// "line L, column C: message" status.
absl::Status ErrorAt(const Pos& pos, std::string_view message);

}  // namespace stepserve::jinja

#endif  // STEPSERVE_ENGINE_TOKENIZER_JINJA_LEXER_H_
