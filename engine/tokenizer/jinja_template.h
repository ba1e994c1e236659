// A parsed Jinja template and its renderer, configured like Hugging Face's chat-template
// environment (jinja2 sandboxed, trim_blocks, lstrip_blocks, loopcontrols, raise_exception,
// strftime_now, tojson = json.dumps with ensure_ascii=False). Rendering never crashes on any
// template text: recursion depth and output size are bounded and reported as errors.
#ifndef STEPSERVE_ENGINE_TOKENIZER_JINJA_TEMPLATE_H_
#define STEPSERVE_ENGINE_TOKENIZER_JINJA_TEMPLATE_H_

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja_ast.h"
#include "engine/tokenizer/jinja_lexer.h"
#include "engine/tokenizer/jinja_value.h"

namespace stepserve::jinja {

struct RenderOptions {
  size_t max_output_bytes = 64u << 20;
  int max_call_depth = 200;  // macro / caller nesting
  // Time seen by strftime_now (UTC); unset = the current time. Tests pin it.
  std::optional<std::time_t> now;
};

class JinjaTemplate {
 public:
  // Parse errors are InvalidArgument with "template line L, column C: ...".
  static absl::StatusOr<JinjaTemplate> Parse(std::string_view source,
                                             const LexOptions& options = {});

  // Renders with `context` as the template's global variables. raise_exception(msg) fails with
  // InvalidArgument whose message contains msg; exceeding limits gives ResourceExhausted.
  absl::StatusOr<std::string> Render(const Object& context,
                                     const RenderOptions& options = {}) const;

 private:
  explicit JinjaTemplate(std::shared_ptr<const Template> t) : tmpl_(std::move(t)) {}
  std::shared_ptr<const Template> tmpl_;
};

}  // namespace stepserve::jinja

#endif  // STEPSERVE_ENGINE_TOKENIZER_JINJA_TEMPLATE_H_
