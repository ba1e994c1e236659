// Jinja parser: tokens to syntax tree, with jinja2's operator precedence. Nesting depth is bounded
// so hostile template text yields an error, never a stack overflow.
#ifndef STEPSERVE_ENGINE_TOKENIZER_JINJA_PARSER_H_
#define STEPSERVE_ENGINE_TOKENIZER_JINJA_PARSER_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja_ast.h"
#include "engine/tokenizer/jinja_lexer.h"

namespace stepserve::jinja {

absl::StatusOr<std::unique_ptr<Template>> ParseTemplate(std::string_view source,
                                                        const LexOptions& options = {});

}  // namespace stepserve::jinja

#endif  // STEPSERVE_ENGINE_TOKENIZER_JINJA_PARSER_H_
