// Unit tests of the chat-template interpreter. The expected strings of the
// table were produced by Jinja2 3.1 (Debian's python3-jinja2) in the
// environment reference_render.py builds, i.e. transformers' settings.
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "shared/tokenize/chat_template/chat_template.h"

namespace kvindex::chat_template {
namespace {

using json = nlohmann::ordered_json;

struct Case {
  const char* name;
  const char* source;
  const char* context;
  const char* expected;
};

constexpr Case kCases[] = {
    {"trim_blocks", "{% if true %}\012A\012{% endif %}\012B", "{}", "A\012B"},
    {"lstrip_blocks", "  {% if true %}A{% endif %}\012  {{ 'v' }}\012", "{}", "A  v"},
    {"dash_and_plus", "a  \012 {%- if true -%}  \012 b {%+ if true %}c{% endif %}{% endif %}", "{}",
     "ab c"},
    {"comment", "x {# note #}\012y\012  {# indented #}\012z", "{}", "x y\012z"},
    {"crlf_and_trailing_newline", "a\015\012b\015c\012", "{}", "a\012b\012c"},
    {"arithmetic",
     "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} {{ 1 + 2.5 "
     "}} {{ 'a' ~ 1 ~ none }}",
     "{}", "3 -4 2 2.0 1024 abab 3.5 a1None"},
    {"float_repr",
     "{{ 1e15 }} {{ 1e16 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1.5 }} {{ 3.0 }} {{ 0.1 + 0.2 }}", "{}",
     "1000000000000000.0 1e+16 0.0001 1e-05 1.5 3.0 0.30000000000000004"},
    {"compare_chain",
     "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 1 == 1.0 }}",
     "{}", "True False True True True"},
    {"and_or_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }}", "{}", "x b []"},
    {"ternary", "{{ 'y' if x else 'n' }}{{ 'z' if not x }}", "{\"x\": false}", "nz"},
    {"str_of_values",
     "{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'k': 1.0} }} {{ (1,) }} {{ undefined_thing }}",
     "{}", "None True [1, 'a', None] {'k': 1.0} (1,) "},
    {"slices",
     "{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1,2,3,4][::2] }} {{ [1,2,3][-1] }} {{ "
     "'h\303\251llo'[1] }} {{ [1,2,3][5:] }}",
     "{}", "el olleh [1, 3] 3 \303\251 []"},
    {"string_methods",
     "{{ '  x  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ "
     "'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x','c')) }}|{{ 'xxa'.lstrip('x') }}|{{ "
     "'a-b'.replace('-', '+') }}|{{ 'h\303\251llo'.find('l') }}|{{ 'aaa'.count('a') }}|{{ "
     "'-'.join(['a','b']) }}|{{ 'ABC'.lower() }}|{{ '\343\200\200y\342\200\203'.strip() }}",
     "{}", "x|['a', 'b', '', 'c']|['a', 'b']|True|True|a|a+b|2|3|a-b|abc|y"},
    {"dict_methods",
     "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys() | list }}{{ d.get('z', 0) "
     "}}{{ d.a }}{{ d['b'] }}",
     "{\"d\": {\"b\": 2, \"a\": 1}}", "b=2;a=1;['b', 'a']012"},
    {"filters",
     "{{ '  t  ' | trim }}|{{ [1,2,3] | length }}|{{ [3,4] | first }}|{{ [3,4] | last }}|{{ [1,2] "
     "| join(', ') }}|{{ x | default('dflt') }}|{{ 'abc' | upper }}|{{ [1,2] | reverse | list "
     "}}|{{ 5 | string }}|{{ '12' | int + 1 }}|{{ -3 | abs }}|{{ 'h\303\251llo' | length }}",
     "{}", "t|3|3|4|1, 2|dflt|ABC|[2, 1]|5|13|3|5"},
    {"tojson",
     "{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ v | tojson(separators=(',', ':'), "
     "sort_keys=true) }}|{{ '\303\251' | tojson(true) }}",
     "{\"v\": {\"b\": \"\303\274\\n\\\"\\u0001\", \"a\": [1, 2.5, null, true, 1e+20]}}",
     "{\"b\": \"\303\274\\n\\\"\\u0001\", \"a\": [1, 2.5, null, true, 1e+20]}|{\012  \"b\": "
     "\"\303\274\\n\\\"\\u0001\",\012  \"a\": [\012    1,\012    2.5,\012    null,\012    "
     "true,\012    1e+20\012  "
     "]\012}|{\"a\":[1,2.5,null,true,1e+20],\"b\":\"\303\274\\n\\\"\\u0001\"}|\"\\u00e9\""},
    {"select_map",
     "{{ xs | selectattr('on') | map(attribute='n') | join(',') }}|{{ xs | rejectattr('on') | "
     "map(attribute='n') | list }}|{{ [1,2,3,4] | select('even') | list }}|{{ xs | selectattr('n', "
     "'equalto', 'c') | list | length }}",
     "{\"xs\": [{\"n\": \"a\", \"on\": true}, {\"n\": \"b\", \"on\": false}, {\"n\": \"c\", "
     "\"on\": true}]}",
     "a,c|['b']|[2, 4]|1"},
    {"indent", "{{ 'a\012b\012\012c' | indent(2) }}|{{ 'x\012y' | indent(2, first=true) }}", "{}",
     "a\012  b\012\012  c|  x\012  y"},
    {"tests",
     "{{ x is defined }}{{ y is none }}{{ 's' is string }}{{ 1 is number }}{{ 1.0 is integer }}{{ "
     "{} is mapping }}{{ [] is iterable }}{{ 3 is odd }}{{ 4 is divisibleby 2 }}{{ 1 is eq 1 }}{{ "
     "x is not defined }}{{ true is boolean }}",
     "{\"y\": null}", "FalseTrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrue"},
    {"loop_vars",
     "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ "
     "loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', 'e') "
     "}};{% endfor %}",
     "{}", "103TrueFalse3bo;212FalseFalse3ace;321FalseTrue3bo;"},
    {"loop_else_filter",
     "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in [1,2,3,4] if x is even %}{{ x }}{{ "
     "loop.length }}{% endfor %}",
     "{}", "empty2242"},
    {"loop_scope",
     "{% set x = 0 %}{% for i in [1,2] %}{{ x }}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
     "{}", "01020"},
    {"namespace",
     "{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ "
     "ns.n }}",
     "{}", "6"},
    {"break_continue",
     "{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% "
     "endif %}{{ i }}{% endfor %}",
     "{}", "023"},
    {"macro",
     "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ "
     "greet('B', punct='\077') }}",
     "{}", "Hi A! Hi B\077"},
    {"set_block_and_unpack",
     "{% set a, b = 1, 2 %}{% set blk %}[{{ a + b }}]{% endset %}{{ blk }}{{ blk | length }}", "{}",
     "[3]3"},
    {"generation", "{% generation %}gen{% endgeneration %}", "{}", "gen"},
    {"string_escapes", "{{ 'a\\tb\\n\\u00e9\\x41' }}{{ \"q'\" }}", "{}", "a\011b\012\303\251Aq'"},
    {"dict_literal_and_attr_fallback",
     "{{ {'a': 1}['a'] }}{{ {'a': 1}.a }}{{ m.role }}{{ m['content'] }}{{ m.missing is defined }}",
     "{\"m\": {\"role\": \"user\", \"content\": \"c\"}}", "11usercFalse"},
    {"scope_assigned_later_and_generators",
     "{% for i in [1] %}[{{ s }}]{% endfor %}{% set s = 'ab' %}{{ s }}[{{ t }}]{{ 'y' if ([] | "
     "select) else 'n' "
     "}}{{ [1] | map('string') | list }}",
     "{\"s\": \"CTX\", \"t\": \"T\"}", "[]ab[T]y['1']"},
};

TEST(ChatTemplateTest, MatchesJinja2) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto tmpl = ChatTemplate::Parse(c.source);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    auto out = tmpl->Render(json::parse(c.context));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, c.expected);
  }
}

// Parse-time refusals name the construct, with Unimplemented.
TEST(ChatTemplateTest, RefusesUnsupportedConstructsByName) {
  const std::pair<const char*, const char*> kRefused[] = {
      {"{% include 'x' %}", "statement 'include'"},
      {"{% extends 'x' %}", "statement 'extends'"},
      {"{% call m() %}x{% endcall %}", "statement 'call'"},
      {"{% filter upper %}x{% endfilter %}", "statement 'filter'"},
      {"{% raw %}x{% endraw %}", "statement 'raw'"},
      {"{{ x | wordwrap }}", "filter 'wordwrap'"},
      {"{{ x | safe }}", "filter 'safe'"},
      {"{{ x is escaped }}", "test 'escaped'"},
      {"{{ x.format(1) }}", "method 'format()'"},
      {"{{ messages.append(1) }}", "method 'append()'"},
      {"{% for x in y recursive %}{% endfor %}", "for ... recursive"},
      {"{{ f(*args) }}", "*args"},
  };
  for (const auto& [source, what] : kRefused) {
    SCOPED_TRACE(source);
    auto tmpl = ChatTemplate::Parse(source);
    ASSERT_FALSE(tmpl.ok());
    EXPECT_TRUE(absl::IsUnimplemented(tmpl.status())) << tmpl.status();
    EXPECT_NE(tmpl.status().message().find(what), std::string::npos) << tmpl.status();
  }
}

// Operations outside the subset that only the data reveals are refused at
// render time, also with Unimplemented.
TEST(ChatTemplateTest, RefusesUnsupportedOperationsAtRenderTime) {
  const std::pair<const char*, const char*> kRefused[] = {
      {"{{ s.upper() }}", "non-ASCII"},
      {"{{ s.title }}", "str method 'title'"},
      {"{{ [s] }}", "repr() of a non-ASCII string"},
      {"{{ 9223372036854775807 + 1 }}", "beyond 64 bits"},
      {"{{ '%s' % s }}", "printf-style"},
      {"{{ [1] | map('string') }}", "generator"},
      {"{{ {'a': 1}.items() }}", "dict view"},
      {"{{ lipsum() }}", "global function 'lipsum'"},
  };
  for (const auto& [source, what] : kRefused) {
    SCOPED_TRACE(source);
    auto tmpl = ChatTemplate::Parse(source);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    auto out = tmpl->Render(json{{"s", "é"}});
    ASSERT_FALSE(out.ok());
    EXPECT_TRUE(absl::IsUnimplemented(out.status())) << out.status();
    EXPECT_NE(out.status().message().find(what), std::string::npos) << out.status();
  }
}

TEST(ChatTemplateTest, SyntaxErrorsAreInvalidArgument) {
  for (const char* source :
       {"{% if x %}", "{{ 1 + }}", "{% endfor %}", "{{ (1 }}", "{# open", "{% bogus %}"}) {
    SCOPED_TRACE(source);
    auto tmpl = ChatTemplate::Parse(source);
    ASSERT_FALSE(tmpl.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(tmpl.status())) << tmpl.status();
  }
}

TEST(ChatTemplateTest, RaiseExceptionAndJinjaErrors) {
  auto tmpl = ChatTemplate::Parse("{{ raise_exception('roles must alternate: ' ~ n) }}");
  ASSERT_TRUE(tmpl.ok());
  auto out = tmpl->Render(json{{"n", 3}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), std::string(kRaisedPrefix) + "roles must alternate: 3");

  // Attribute of an undefined value, str + int, `x.y = ` on a non-namespace.
  for (const char* source :
       {"{{ nothing.at_all }}", "{{ 'a' + 1 }}", "{% set d = {} %}{% set d.x = 1 %}"}) {
    SCOPED_TRACE(source);
    auto t = ChatTemplate::Parse(source);
    ASSERT_TRUE(t.ok()) << t.status();
    auto r = t->Render(json::object());
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  }
}

TEST(ChatTemplateTest, LimitsStopRunawayTemplates) {
  auto tmpl = ChatTemplate::Parse("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_TRUE(tmpl.ok());
  auto out = tmpl->Render(json::object());
  EXPECT_TRUE(absl::IsResourceExhausted(out.status())) << out.status();

  auto big = ChatTemplate::Parse(
      "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}");
  ASSERT_TRUE(big.ok());
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  EXPECT_TRUE(absl::IsResourceExhausted(big->Render(json::object(), limits).status()));
}

TEST(RenderChatTest, BuildsTheContextLikeTransformers) {
  const nlohmann::json config = nlohmann::json::parse(R"({
    "bos_token": {"__type": "AddedToken", "content": "<B>", "lstrip": false},
    "eos_token": "<E>", "unk_token": null,
    "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}{% if add_generation_prompt %}>{% endif %}{{ unk_token is defined }}{{ tools | tojson }}{{ eos_token }}{{ flag }}"
  })");
  const json messages = json::parse(R"([{"role": "user", "content": "hi"}])");
  auto out = RenderChat(config, messages, true, json::parse(R"([{"z": 1, "a": 2}])"),
                        json{{"flag", true}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<B>user:hi>False[{\"z\": 1, \"a\": 2}]<E>True");

  out = RenderChat(config, messages, false);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<B>user:hiFalsenull<E>");
}

TEST(RenderChatTest, NamedTemplatesAndMissingTemplate) {
  const nlohmann::json config = nlohmann::json::parse(R"({
    "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(*RenderChat(config, json::array(), false), "D");
  EXPECT_EQ(*RenderChat(config, json::array(), false, json::array()), "T");
  auto none = RenderChat(nlohmann::json::parse(R"({"chat_template": null})"), json::array(), false);
  EXPECT_TRUE(absl::IsFailedPrecondition(none.status())) << none.status();
}

}  // namespace
}  // namespace kvindex::chat_template
