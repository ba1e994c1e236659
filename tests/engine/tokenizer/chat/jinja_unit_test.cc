// Unit tests of the Jinja interpreter: constructs, whitespace control, errors with positions.
#include <string>

#include "engine/tokenizer/jinja_template.h"
#include "gtest/gtest.h"

namespace stepserve::jinja {
namespace {

absl::StatusOr<std::string> R(const std::string& src, const std::string& ctx_json = "{}") {
  auto t = JinjaTemplate::Parse(src);
  if (!t.ok()) return t.status();
  auto ctx = ParseJson(ctx_json);
  if (!ctx.ok()) return ctx.status();
  return t->Render(ctx->object());
}

std::string Ok(const std::string& src, const std::string& ctx = "{}") {
  auto r = R(src, ctx);
  EXPECT_TRUE(r.ok()) << src << ": " << r.status();
  return r.ok() ? *r : "<error>";
}

TEST(Jinja, OutputAndLiterals) {
  EXPECT_EQ(Ok("{{ 1 + 2 }}|{{ 'a' ~ 1 }}|{{ [1,'a',none,true,1.5] }}"),
            "3|a1|[1, 'a', None, True, 1.5]");
  EXPECT_EQ(Ok("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1e20 }}"),
            "3 -4 2 3.5 1024 1e+20");
  EXPECT_EQ(Ok("{{ {'k': 'v', 'n': 1} }}"), "{'k': 'v', 'n': 1}");
}

TEST(Jinja, WhitespaceControl) {
  EXPECT_EQ(Ok("a\n  {% if true %}\nb\n  {% endif %}\nc"), "a\nb\nc");
  EXPECT_EQ(Ok("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(Ok("x {#- comment -#} y"), "xy");
  EXPECT_EQ(Ok("line\n"), "line");
}

TEST(Jinja, IfForLoopVars) {
  EXPECT_EQ(Ok("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
               "{{ loop.length }}{{ loop.revindex }};{% endfor %}",
               R"({"xs": ["a", "b"]})"),
            "10TrueFalse22;21FalseTrue21;");
  EXPECT_EQ(Ok("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Ok("{% for x in [1,2,3,4] if x is even %}{{ x }}{% endfor %}"), "24");
  EXPECT_EQ(Ok("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}", R"({"d":{"a":1,"b":2}})"),
            "a=1;b=2;");
  EXPECT_EQ(Ok("{% for x in [1,2,3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "1");
  EXPECT_EQ(Ok("{% if 0 %}a{% elif '' %}b{% else %}c{% endif %}"), "c");
}

TEST(Jinja, SetScopingAndNamespace) {
  EXPECT_EQ(Ok("{% set x = 0 %}{% for i in [1,2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"),
            "120");
  EXPECT_EQ(Ok("{% set ns = namespace(n=0) %}{% for i in [1,2] %}{% set ns.n = ns.n + i %}"
               "{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(Ok("{% set b %}in{{ 1 }}{% endset %}[{{ b }}]"), "[in1]");
}

TEST(Jinja, MacroAndCall) {
  EXPECT_EQ(Ok("{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, b=3) }}"),
            "1-2 1-3");
  EXPECT_EQ(Ok("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}x{% endcall %}"), "[x]");
}

TEST(Jinja, FiltersAndTests) {
  EXPECT_EQ(
      Ok("{{ ' a '|trim }}|{{ 'ab'|upper }}|{{ [1,2]|join(',') }}|{{ [3,4]|first }}"
         "|{{ [3,4]|last }}|{{ u|default('d') }}|{{ 'x'|length }}|{{ -3|abs }}|{{ '5'|int }}"),
      "a|AB|1,2|3|4|d|1|3|5");
  EXPECT_EQ(Ok("{{ {'a': 'é', 'b': [1, none]}|tojson }}"), "{\"a\": \"é\", \"b\": [1, null]}");
  EXPECT_EQ(Ok("{{ {'a': 1}|tojson(indent=2) }}"), "{\n  \"a\": 1\n}");
  EXPECT_EQ(Ok("{{ 'é'|tojson(ensure_ascii=True) }}"), "\"\\u00e9\"");
  EXPECT_EQ(Ok("{{ ['a','b','c']|reject('equalto','b')|list }}"), "['a', 'c']");
  EXPECT_EQ(Ok("{{ xs|selectattr('k')|map(attribute='k')|list }}", R"({"xs":[{"k":1},{"k":0}]})"),
            "[1]");
  EXPECT_EQ(Ok("{{ 'a\nb'|indent(2) }}"), "a\n  b");
  EXPECT_EQ(Ok("{{ x is defined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}"
               "{{ [] is iterable }}{{ 1 is number }}{{ 'a' is not mapping }}{{ false is false }}"),
            "FalseTrueTrueTrueTrueTrueTrueTrue");
}

TEST(Jinja, MethodsSlicingAndIn) {
  EXPECT_EQ(
      Ok("{{ 'a,b'.split(',') }}{{ ' x '.strip() }}{{ 'xay'.lstrip('x') }}"
         "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'a-b'.replace('-', '+') }}"),
      "['a', 'b']xayTrueTruea+b");
  EXPECT_EQ(Ok("{{ 'héllo'[1:3] }}{{ [1,2,3][::-1] }}{{ [1,2,3][-1] }}{{ 'b' in 'abc' }}"
               "{{ 'k' in d }}{{ 3 not in [1] }}{{ d.get('k') }}{{ d.get('z', 9) }}",
               R"({"d":{"k":5}})"),
            "él[3, 2, 1]3TrueTrueTrue59");
  EXPECT_EQ(Ok("{{ 'a' if x else 'b' }}"), "b");
}

TEST(Jinja, ErrorsCarryPositions) {
  auto r = R("ok\n{{ 1 + }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("line 2"), std::string::npos) << r.status();
  r = R("{% if x %}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("endif"), std::string::npos);
  r = R("a\n  {{ x|nosuch }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("line 2, column 7"), std::string::npos)
      << r.status();
  r = R("{{ raise_exception('boom') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("boom"), std::string::npos);
  EXPECT_FALSE(R("{{ 'a' + u }}").ok());
  EXPECT_FALSE(R("{{ u.x }}").ok());
  EXPECT_FALSE(R("{% set l = [] %}{{ l.append(1) }}").ok());
  EXPECT_FALSE(R("{% foo %}").ok());
  EXPECT_FALSE(R("{{ 'unterminated }}").ok());
}

TEST(Jinja, LimitsNeverCrash) {
  EXPECT_FALSE(R("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").ok());
  EXPECT_FALSE(R("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").ok());
  EXPECT_FALSE(R("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}").ok());
  // Truncated inputs of a real-looking template: errors or output, never a crash.
  std::string src =
      "{% for m in messages %}{{ m.role|upper ~ ':' }}{% if m.x %}{% endif %}{% endfor %}";
  for (size_t n = 0; n < src.size(); ++n)
    (void)R(src.substr(0, n), R"({"messages":[{"role":"u"}]})");
}

}  // namespace
}  // namespace stepserve::jinja
