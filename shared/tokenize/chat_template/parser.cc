#include "shared/tokenize/chat_template/parser.h"

#include <charconv>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "shared/tokenize/chat_template/builtins.h"
#include "shared/tokenize/chat_template/lexer.h"

namespace kvindex::chat_template {
namespace {

using TK = Token::Kind;

Status Unsupported(int line, std::string_view what) {
  return absl::UnimplementedError(
      absl::StrCat("chat template line ", line, ": unsupported ", std::string(what)));
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  StatusOr<Body> Run() {
    Body body;
    std::string end;
    KVINDEX_RETURN_IF_ERROR(ParseBody({}, body, end));
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& Next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == TK::kOp && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == TK::kName && Peek(ahead).text == name;
  }
  Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template line ", Peek().line, ": ", std::string(what)));
  }
  Status ExpectOp(std::string_view op) {
    if (!IsOp(op))
      return Error(absl::StrCat("expected '", std::string(op), "', got '", Peek().text, "'"));
    ++i_;
    return absl::OkStatus();
  }
  Status ExpectBlockEnd() {
    if (Peek().kind != TK::kBlockEnd)
      return Error(absl::StrCat("expected end of statement, got '", Peek().text, "'"));
    ++i_;
    return absl::OkStatus();
  }
  StatusOr<std::string> ExpectName() {
    if (Peek().kind != TK::kName)
      return Error(absl::StrCat("expected a name, got '", Peek().text, "'"));
    return Next().text;
  }

  // Parses nodes until a {% name %} with name in `ends` (consumed up to the
  // name; *end is set) or the end of the template (only when ends is empty).
  Status ParseBody(const std::vector<std::string_view>& ends, Body& body, std::string& end) {
    while (true) {
      const Token& tok = Peek();
      switch (tok.kind) {
        case TK::kEof:
          if (!ends.empty())
            return Error(
                absl::StrCat("unexpected end of template, expected '", std::string(ends[0]), "'"));
          return absl::OkStatus();
        case TK::kData: {
          Node n{Node::Kind::kText};
          n.line = tok.line;
          n.text = tok.text;
          body.push_back(std::move(n));
          ++i_;
          break;
        }
        case TK::kVarBegin: {
          ++i_;
          Node n{Node::Kind::kOutput};
          n.line = tok.line;
          KVINDEX_ASSIGN_OR_RETURN(n.expr, ParseTuple(true));
          if (Peek().kind != TK::kVarEnd)
            return Error(absl::StrCat("expected '}}', got '", Peek().text, "'"));
          ++i_;
          body.push_back(std::move(n));
          break;
        }
        case TK::kBlockBegin: {
          ++i_;
          if (Peek().kind != TK::kName) return Error("expected a statement name");
          const std::string name = Peek().text;
          for (const auto e : ends) {
            if (name == e) {
              ++i_;
              end = name;
              return absl::OkStatus();
            }
          }
          KVINDEX_RETURN_IF_ERROR(ParseStatement(body));
          break;
        }
        default:
          return Error(absl::StrCat("unexpected token '", tok.text, "'"));
      }
    }
  }

  Status ParseStatement(Body& body) {
    const int line = Peek().line;
    const std::string name = Next().text;
    Node n{Node::Kind::kText};
    n.line = line;
    std::string end;
    if (name == "if") {
      n.kind = Node::Kind::kIf;
      while (true) {
        KVINDEX_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(true));
        KVINDEX_RETURN_IF_ERROR(ExpectBlockEnd());
        Body branch;
        KVINDEX_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, branch, end));
        n.conditions.push_back(std::move(cond));
        n.bodies.push_back(std::move(branch));
        if (end == "elif") continue;
        if (end == "else") {
          KVINDEX_RETURN_IF_ERROR(ExpectBlockEnd());
          KVINDEX_RETURN_IF_ERROR(ParseBody({"endif"}, n.else_body, end));
        }
        break;
      }
    } else if (name == "for") {
      n.kind = Node::Kind::kFor;
      const bool paren = IsOp("(");
      if (paren) ++i_;
      while (true) {
        KVINDEX_ASSIGN_OR_RETURN(std::string target, ExpectName());
        n.targets.push_back(std::move(target));
        if (!IsOp(",")) break;
        ++i_;
        if (IsName("in") || IsOp(")")) break;
      }
      if (paren) KVINDEX_RETURN_IF_ERROR(ExpectOp(")"));
      if (!IsName("in")) return Error("expected 'in' in for loop");
      ++i_;
      KVINDEX_ASSIGN_OR_RETURN(n.expr, ParseTuple(false));
      if (IsName("if")) {
        ++i_;
        KVINDEX_ASSIGN_OR_RETURN(n.filter, ParseExpression(true));
      }
      if (IsName("recursive")) return Unsupported(line, "statement 'for ... recursive'");
      KVINDEX_RETURN_IF_ERROR(ExpectBlockEnd());
      KVINDEX_RETURN_IF_ERROR(ParseBody({"else", "endfor"}, n.body, end));
      if (end == "else") {
        KVINDEX_RETURN_IF_ERROR(ExpectBlockEnd());
        KVINDEX_RETURN_IF_ERROR(ParseBody({"endfor"}, n.else_body, end));
      }
    } else if (name == "set") {
      KVINDEX_ASSIGN_OR_RETURN(std::string target, ExpectName());
      if (IsOp(".")) {
        ++i_;
        KVINDEX_ASSIGN_OR_RETURN(n.attr, ExpectName());
        n.targets.push_back(std::move(target));
      } else {
        n.targets.push_back(std::move(target));
        while (IsOp(",")) {
          ++i_;
          KVINDEX_ASSIGN_OR_RETURN(std::string more, ExpectName());
          n.targets.push_back(std::move(more));
        }
      }
      if (IsOp("=")) {
        ++i_;
        n.kind = Node::Kind::kSet;
        KVINDEX_ASSIGN_OR_RETURN(n.expr, ParseTuple(true));
      } else {
        if (IsOp("|")) return Unsupported(line, "filtered block set ('{% set x | filter %}')");
        if (n.targets.size() != 1 || !n.attr.empty())
          return Error("block set needs one plain name");
        n.kind = Node::Kind::kSetBlock;
        KVINDEX_RETURN_IF_ERROR(ExpectBlockEnd());
        KVINDEX_RETURN_IF_ERROR(ParseBody({"endset"}, n.body, end));
      }
    } else if (name == "macro") {
      n.kind = Node::Kind::kMacro;
      KVINDEX_ASSIGN_OR_RETURN(n.text, ExpectName());
      KVINDEX_RETURN_IF_ERROR(ExpectOp("("));
      while (!IsOp(")")) {
        if (!n.params.empty()) KVINDEX_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
        KVINDEX_ASSIGN_OR_RETURN(std::string param, ExpectName());
        ExprPtr def;
        if (IsOp("=")) {
          ++i_;
          KVINDEX_ASSIGN_OR_RETURN(def, ParseExpression(true));
        }
        n.params.emplace_back(std::move(param), std::move(def));
      }
      ++i_;
      KVINDEX_RETURN_IF_ERROR(ExpectBlockEnd());
      KVINDEX_RETURN_IF_ERROR(ParseBody({"endmacro"}, n.body, end));
      if (Peek().kind == TK::kName && Peek().text == n.text) ++i_;
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return Error(absl::StrCat("'", name, "' outside a loop"));
      n.kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
    } else if (name == "generation") {
      n.kind = Node::Kind::kGeneration;
      KVINDEX_RETURN_IF_ERROR(ExpectBlockEnd());
      KVINDEX_RETURN_IF_ERROR(ParseBody({"endgeneration"}, n.body, end));
    } else if (name == "call" || name == "filter" || name == "with" || name == "include" ||
               name == "import" || name == "from" || name == "extends" || name == "block" ||
               name == "raw" || name == "autoescape" || name == "do" || name == "trans") {
      return Unsupported(line, absl::StrCat("statement '", name, "'"));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template line ", line, ": unknown statement '", name, "'"));
    }
    KVINDEX_RETURN_IF_ERROR(ExpectBlockEnd());
    body.push_back(std::move(n));
    return absl::OkStatus();
  }

  // ---- expressions ----

  ExprPtr Make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  StatusOr<ExprPtr> ParseTuple(bool with_condexpr) {
    const int line = Peek().line;
    KVINDEX_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condexpr));
    if (!IsOp(",")) return first;
    ExprPtr tuple = Make(Expr::Kind::kTuple, line);
    tuple->children.push_back(std::move(first));
    while (IsOp(",")) {
      ++i_;
      if (Peek().kind == TK::kVarEnd || Peek().kind == TK::kBlockEnd || IsOp(")") || IsName("in"))
        break;
      KVINDEX_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
      tuple->children.push_back(std::move(item));
    }
    return tuple;
  }

  StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    if (++depth_ > 200) return Error("expression nested too deeply");
    auto result = ParseExpressionInner(with_condexpr);
    --depth_;
    return result;
  }

  StatusOr<ExprPtr> ParseExpressionInner(bool with_condexpr) {
    KVINDEX_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    if (!with_condexpr) return expr;
    while (IsName("if")) {
      const int line = Next().line;
      ExprPtr cond = Make(Expr::Kind::kCondExpr, line);
      KVINDEX_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        ++i_;
        KVINDEX_ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
      }
      cond->children.push_back(std::move(test));
      cond->children.push_back(std::move(expr));
      cond->children.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  StatusOr<ExprPtr> ParseOr() {
    KVINDEX_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      ExprPtr e = Make(Expr::Kind::kOr, Next().line);
      KVINDEX_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      e->children.push_back(std::move(left));
      e->children.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  StatusOr<ExprPtr> ParseAnd() {
    KVINDEX_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      ExprPtr e = Make(Expr::Kind::kAnd, Next().line);
      KVINDEX_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      e->children.push_back(std::move(left));
      e->children.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      ExprPtr e = Make(Expr::Kind::kNot, Next().line);
      if (++depth_ > 200) return Error("expression nested too deeply");
      auto operand = ParseNot();
      --depth_;
      if (!operand.ok()) return operand.status();
      e->children.push_back(std::move(*operand));
      return e;
    }
    return ParseCompare();
  }

  StatusOr<ExprPtr> ParseCompare() {
    const int line = Peek().line;
    KVINDEX_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Peek().kind == TK::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++i_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        i_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = Make(Expr::Kind::kCompare, line);
        cmp->children.push_back(std::move(first));
      }
      KVINDEX_ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
      cmp->ops.push_back(std::move(op));
      cmp->children.push_back(std::move(right));
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  StatusOr<ExprPtr> Binary(ExprPtr left, std::string op, ExprPtr right, int line) {
    ExprPtr e = Make(Expr::Kind::kBinary, line);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  StatusOr<ExprPtr> ParseMath1() {
    KVINDEX_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const Token& op = Next();
      KVINDEX_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      KVINDEX_ASSIGN_OR_RETURN(left, Binary(std::move(left), op.text, std::move(right), op.line));
    }
    return left;
  }

  StatusOr<ExprPtr> ParseConcat() {
    KVINDEX_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      const Token& op = Next();
      KVINDEX_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      KVINDEX_ASSIGN_OR_RETURN(left, Binary(std::move(left), "~", std::move(right), op.line));
    }
    return left;
  }

  StatusOr<ExprPtr> ParseMath2() {
    KVINDEX_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& op = Next();
      KVINDEX_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      KVINDEX_ASSIGN_OR_RETURN(left, Binary(std::move(left), op.text, std::move(right), op.line));
    }
    return left;
  }

  StatusOr<ExprPtr> ParsePow() {
    KVINDEX_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      const Token& op = Next();
      KVINDEX_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      KVINDEX_ASSIGN_OR_RETURN(left, Binary(std::move(left), "**", std::move(right), op.line));
    }
    return left;
  }

  StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    if (++depth_ > 200) return Error("expression nested too deeply");
    auto result = ParseUnaryInner(with_filter);
    --depth_;
    return result;
  }

  StatusOr<ExprPtr> ParseUnaryInner(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token& op = Next();
      node = Make(op.text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos, op.line);
      KVINDEX_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->children.push_back(std::move(operand));
    } else {
      KVINDEX_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    KVINDEX_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      KVINDEX_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  StatusOr<ExprPtr> ParsePrimary() {
    const Token& tok = Peek();
    switch (tok.kind) {
      case TK::kName: {
        ++i_;
        const std::string& n = tok.text;
        if (n == "true" || n == "True") return Literal(Value::Bool(true), tok.line);
        if (n == "false" || n == "False") return Literal(Value::Bool(false), tok.line);
        if (n == "none" || n == "None") return Literal(Value::None(), tok.line);
        ExprPtr e = Make(Expr::Kind::kName, tok.line);
        e->name = n;
        return e;
      }
      case TK::kString: {
        std::string s;
        while (Peek().kind == TK::kString) s += Next().text;
        return Literal(Value::String(std::move(s)), tok.line);
      }
      case TK::kInt: {
        ++i_;
        int64_t v = 0;
        const auto res = std::from_chars(tok.text.data(), tok.text.data() + tok.text.size(), v);
        if (res.ec != std::errc()) return Unsupported(tok.line, "integer literal beyond 64 bits");
        return Literal(Value::Int(v), tok.line);
      }
      case TK::kFloat: {
        ++i_;
        return Literal(Value::Float(std::strtod(tok.text.c_str(), nullptr)), tok.line);
      }
      case TK::kOp:
        if (tok.text == "(") {
          ++i_;
          if (IsOp(")")) {
            ++i_;
            return Make(Expr::Kind::kTuple, tok.line);
          }
          KVINDEX_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true));
          KVINDEX_RETURN_IF_ERROR(ExpectOp(")"));
          return inner;
        }
        if (tok.text == "[") {
          ++i_;
          ExprPtr list = Make(Expr::Kind::kList, tok.line);
          while (!IsOp("]")) {
            if (!list->children.empty()) KVINDEX_RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("]")) break;
            KVINDEX_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
            list->children.push_back(std::move(item));
          }
          ++i_;
          return list;
        }
        if (tok.text == "{") {
          ++i_;
          ExprPtr dict = Make(Expr::Kind::kDict, tok.line);
          while (!IsOp("}")) {
            if (!dict->children.empty()) KVINDEX_RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("}")) break;
            KVINDEX_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
            KVINDEX_RETURN_IF_ERROR(ExpectOp(":"));
            KVINDEX_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
            dict->children.push_back(std::move(key));
            dict->children.push_back(std::move(value));
          }
          ++i_;
          return dict;
        }
        break;
      default:
        break;
    }
    return Error(absl::StrCat("unexpected '", tok.text, "'"));
  }

  ExprPtr Literal(Value v, int line) {
    ExprPtr e = Make(Expr::Kind::kLiteral, line);
    e->literal = std::move(v);
    return e;
  }

  StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      const int line = Peek().line;
      if (IsOp(".")) {
        ++i_;
        if (Peek().kind == TK::kName) {
          ExprPtr e = Make(Expr::Kind::kGetAttr, line);
          e->name = Next().text;
          e->children.push_back(std::move(node));
          node = std::move(e);
        } else if (Peek().kind == TK::kInt) {
          ExprPtr e = Make(Expr::Kind::kGetItem, line);
          e->children.push_back(std::move(node));
          KVINDEX_ASSIGN_OR_RETURN(ExprPtr index, ParsePrimary());
          e->children.push_back(std::move(index));
          node = std::move(e);
        } else {
          return Error("expected a name after '.'");
        }
      } else if (IsOp("[")) {
        ++i_;
        KVINDEX_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), line));
      } else if (IsOp("(")) {
        KVINDEX_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  StatusOr<ExprPtr> ParseSubscript(ExprPtr node, int line) {
    ExprPtr parts[3];
    bool slice = false;
    for (int k = 0; k < 3; ++k) {
      if (!IsOp(":") && !IsOp("]")) {
        KVINDEX_ASSIGN_OR_RETURN(parts[k], ParseExpression(true));
      }
      if (IsOp(":") && k < 2) {
        ++i_;
        slice = true;
        continue;
      }
      break;
    }
    if (IsOp(",")) return Unsupported(line, "tuple subscript");
    KVINDEX_RETURN_IF_ERROR(ExpectOp("]"));
    if (!slice) {
      if (!parts[0]) return Error("empty subscript");
      ExprPtr e = Make(Expr::Kind::kGetItem, line);
      e->children.push_back(std::move(node));
      e->children.push_back(std::move(parts[0]));
      return e;
    }
    ExprPtr e = Make(Expr::Kind::kSlice, line);
    e->children.push_back(std::move(node));
    for (auto& p : parts) e->children.push_back(std::move(p));
    return e;
  }

  Status ParseArgs(Expr& call) {
    KVINDEX_RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) KVINDEX_RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) return Unsupported(Peek().line, "*args / **kwargs in a call");
      if (Peek().kind == TK::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        ++i_;
        KVINDEX_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        call.kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!call.kwargs.empty()) return Error("positional argument after keyword argument");
        KVINDEX_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        call.children.push_back(std::move(value));
      }
    }
    ++i_;
    return absl::OkStatus();
  }

  StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    const int line = Peek().line;
    if (callee->kind == Expr::Kind::kGetAttr && !IsKnownMethod(callee->name)) {
      return Unsupported(line, absl::StrCat("method '", callee->name, "()'"));
    }
    ExprPtr e = Make(Expr::Kind::kCall, line);
    e->children.push_back(std::move(callee));
    KVINDEX_RETURN_IF_ERROR(ParseArgs(*e));
    return e;
  }

  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        const int line = Next().line;
        KVINDEX_ASSIGN_OR_RETURN(std::string name, ExpectName());
        while (IsOp(".")) {
          ++i_;
          KVINDEX_ASSIGN_OR_RETURN(std::string part, ExpectName());
          name += "." + part;
        }
        if (!IsKnownFilter(name)) return Unsupported(line, absl::StrCat("filter '", name, "'"));
        ExprPtr e = Make(Expr::Kind::kFilter, line);
        e->name = std::move(name);
        e->children.push_back(std::move(node));
        if (IsOp("(")) KVINDEX_RETURN_IF_ERROR(ParseArgs(*e));
        node = std::move(e);
      } else if (IsName("is")) {
        const int line = Next().line;
        bool negated = false;
        if (IsName("not")) {
          ++i_;
          negated = true;
        }
        KVINDEX_ASSIGN_OR_RETURN(std::string name, ExpectName());
        if (!IsKnownTest(name)) return Unsupported(line, absl::StrCat("test '", name, "'"));
        ExprPtr e = Make(Expr::Kind::kTest, line);
        e->name = std::move(name);
        e->negated = negated;
        e->children.push_back(std::move(node));
        if (IsOp("(")) {
          KVINDEX_RETURN_IF_ERROR(ParseArgs(*e));
        } else if ((Peek().kind == TK::kName || Peek().kind == TK::kString ||
                    Peek().kind == TK::kInt || Peek().kind == TK::kFloat || IsOp("[") ||
                    IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          if (IsName("is")) return Error("cannot chain multiple tests with 'is'");
          KVINDEX_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          KVINDEX_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          e->children.push_back(std::move(arg));
        }
        node = std::move(e);
      } else if (IsOp("(")) {
        KVINDEX_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 1 << 20;  // break/continue placement is checked at run time
};

}  // namespace

StatusOr<Body> ParseTemplate(std::string_view source) {
  KVINDEX_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source));
  Parser parser(std::move(tokens));
  return parser.Run();
}

}  // namespace kvindex::chat_template
