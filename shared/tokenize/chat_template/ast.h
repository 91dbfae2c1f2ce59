// The syntax tree of a parsed chat template: expressions (Expr) and
// statements (Node). Built by parser.cc, walked by interpreter.cc.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shared/tokenize/chat_template/value.h"

namespace kvindex::chat_template {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // children
    kTuple,     // children
    kDict,      // children: key, value, key, value...
    kGetAttr,   // children[0].name
    kGetItem,   // children[0][children[1]]
    kSlice,     // children[0][children[1]:children[2]:children[3]] (null = omitted)
    kCall,      // children[0](children[1..], kwargs)
    kFilter,    // children[0] | name(children[1..], kwargs)
    kTest,      // children[0] is [not] name(children[1..])
    kNeg,       // -children[0]
    kPos,       // +children[0]
    kNot,       // not children[0]
    kBinary,    // children[0] name children[1]: + - * / // % ** ~
    kCompare,   // children[0] ops[0] children[1] ops[1] ...: == != < > <= >= in notin
    kAnd,       // children[0] and children[1]
    kOr,        // children[0] or children[1]
    kCondExpr,  // children[1] if children[0] else children[2] (children[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;  // `is not`
  std::vector<std::string> ops;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conditions[i] -> bodies[i]; else_body
    kFor,       // for targets in expr [if filter]: body else else_body
    kSet,       // set targets (or target.attr) = expr
    kSetBlock,  // set target %}body{% endset
    kMacro,     // macro name(params) body
    kBreak,
    kContinue,
    kGeneration,  // transformers' {% generation %}: renders its body
  };
  Node() = default;
  explicit Node(Kind k) : kind(k) {}

  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;  // set ns.attr
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters with defaults (null)
};

}  // namespace kvindex::chat_template
