// Python/jinja2 semantics used by the interpreter: operators, attribute and item access, string /
// dict methods, filters and tests. Errors come back without a position; the interpreter adds the
// position of the expression that failed.
#ifndef STEPSERVE_ENGINE_TOKENIZER_JINJA_BUILTINS_H_
#define STEPSERVE_ENGINE_TOKENIZER_JINJA_BUILTINS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja_value.h"

namespace stepserve::jinja::internal {

// Error for using an undefined value where jinja2 raises UndefinedError.
absl::Status UndefinedError(const Value& undefined);

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b);
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
absl::StatusOr<Value> SliceValue(const Value& obj, const std::optional<int64_t>& start,
                                 const std::optional<int64_t>& stop,
                                 const std::optional<int64_t>& step);
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const CallArgs& args);
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const CallArgs& args);
std::string HtmlEscape(std::string_view s);

}  // namespace stepserve::jinja::internal

#endif  // STEPSERVE_ENGINE_TOKENIZER_JINJA_BUILTINS_H_
