#include "shared/tokenize/chat_template/interpreter.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "shared/tokenize/chat_template/builtins.h"

namespace kvindex::chat_template {
namespace {

using K = Value::Kind;
using EK = Expr::Kind;
using NK = Node::Kind;

enum class Flow { kNormal, kBreak, kContinue };

Status TypeError(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", std::string(what)));
}
Status Overflow() {
  return absl::UnimplementedError("chat template: unsupported integer beyond 64 bits");
}

StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    KVINDEX_ASSIGN_OR_RETURN(std::string x, PyStr(a));
    KVINDEX_ASSIGN_OR_RETURN(std::string y, PyStr(b));
    return Value::String(x + y);
  }
  if (op == "%" && a.is_string()) {
    return absl::UnimplementedError("chat template: unsupported printf-style '%' formatting");
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.lazy() == Value::Lazy::kDictView || b.lazy() == Value::Lazy::kDictView) {
    return absl::UnimplementedError(
        "chat template: unsupported arithmetic on a dict view (Python set operations)");
  }
  if (a.lazy() != Value::Lazy::kNo || b.lazy() != Value::Lazy::kNo) {
    return TypeError(
        absl::StrCat("unsupported operand for ", op, " with a generator or dict view"));
  }
  const bool ints = (a.kind() == K::kInt || a.kind() == K::kBool) &&
                    (b.kind() == K::kInt || b.kind() == K::kBool);
  const bool nums = a.is_number() && b.is_number();
  const int64_t x = a.int_value();
  const int64_t y = b.int_value();
  int64_t r = 0;
  if (op == "+") {
    if (ints) {
      if (__builtin_add_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (nums) return Value::Float(a.float_value() + b.float_value());
    if (a.is_string() && b.is_string()) return Value::String(a.str() + b.str());
    if (a.is_sequence() && a.kind() == b.kind()) {
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.kind() == K::kTuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
    }
  } else if (op == "-") {
    if (ints) {
      if (__builtin_sub_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (nums) return Value::Float(a.float_value() - b.float_value());
  } else if (op == "*") {
    if (ints) {
      if (__builtin_mul_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (nums) return Value::Float(a.float_value() * b.float_value());
    const Value* seq = a.is_string() || a.is_sequence()     ? &a
                       : (b.is_string() || b.is_sequence()) ? &b
                                                            : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq != nullptr && (count->kind() == K::kInt || count->kind() == K::kBool)) {
      const int64_t n = std::max<int64_t>(0, count->int_value());
      const size_t unit = seq->is_string() ? seq->str().size() : seq->items().size();
      if (unit != 0 && static_cast<uint64_t>(n) > (64u << 20) / unit) {
        return absl::ResourceExhaustedError("chat template: repetition too large");
      }
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->str();
        return Value::String(std::move(out));
      }
      std::vector<Value> out;
      for (int64_t i = 0; i < n; ++i)
        out.insert(out.end(), seq->items().begin(), seq->items().end());
      return seq->kind() == K::kTuple ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
    }
  } else if (op == "/") {
    if (nums) {
      if (b.float_value() == 0)
        return absl::InvalidArgumentError("ZeroDivisionError: division by zero");
      return Value::Float(a.float_value() / b.float_value());
    }
  } else if (op == "//" || op == "%") {
    if (ints) {
      if (y == 0)
        return absl::InvalidArgumentError("ZeroDivisionError: integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return Overflow();
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::Int(op == "//" ? q : m);
    }
    if (nums) {
      const double fx = a.float_value();
      const double fy = b.float_value();
      if (fy == 0)
        return absl::InvalidArgumentError("ZeroDivisionError: float division or modulo by zero");
      double m = std::fmod(fx, fy);
      double div = (fx - m) / fy;
      if (m != 0 && ((m < 0) != (fy < 0))) {
        m += fy;
        div -= 1.0;
      }
      if (op == "%") return Value::Float(m == 0 ? std::copysign(0.0, fy) : m);
      double floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
      if (div == 0) floordiv = std::copysign(0.0, fx / fy);
      return Value::Float(floordiv);
    }
    if (op == "%" && a.is_string())
      return absl::UnimplementedError("chat template: unsupported printf-style '%' formatting");
  } else if (op == "**") {
    if (ints && y >= 0) {
      int64_t acc = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(acc, x, &acc)) return Overflow();
        if (acc == 0 || acc == 1) break;
      }
      if (acc == 1 && x == -1 && (y % 2) == 1) acc = -1;
      return Value::Int(acc);
    }
    if (nums) return absl::UnimplementedError("chat template: unsupported float power");
  }
  return TypeError(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                "' and '", b.TypeName(), "'"));
}

class Renderer {
 public:
  Renderer(const Dict& context, const RenderLimits& limits) : context_(context), limits_(limits) {}

  StatusOr<std::string> Run(const Body& body) {
    frames_.push_back(Frame{{}, &AssignedIn(body)});
    std::string out;
    KVINDEX_ASSIGN_OR_RETURN(Flow flow, ExecBody(body, out));
    (void)flow;
    return out;
  }

 private:
  // One scope: its variables and the names its body assigns. Jinja2 makes
  // a name assigned anywhere in a scope local to it: a nested scope (loop
  // body, macro) reading it before the assignment gets undefined, not the
  // context's value (the scope itself still reads the outer value first).
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    const std::vector<std::string>* assigned = nullptr;
  };

  static void CollectAssigned(const Body& body, std::vector<std::string>& out) {
    for (const Node& n : body) {
      switch (n.kind) {
        case NK::kSet:
          if (n.attr.empty()) out.insert(out.end(), n.targets.begin(), n.targets.end());
          break;
        case NK::kSetBlock:
          out.push_back(n.targets[0]);
          break;
        case NK::kMacro:
          out.push_back(n.text);
          break;
        case NK::kIf:
          for (const Body& b : n.bodies) CollectAssigned(b, out);
          CollectAssigned(n.else_body, out);
          break;
        case NK::kFor:
          CollectAssigned(n.else_body, out);
          break;
        case NK::kGeneration:
          CollectAssigned(n.body, out);
          break;
        default:
          break;
      }
    }
  }

  const std::vector<std::string>& AssignedIn(const Body& body) {
    auto it = assigned_.find(&body);
    if (it == assigned_.end()) {
      std::vector<std::string> names;
      CollectAssigned(body, names);
      it = assigned_.emplace(&body, std::move(names)).first;
    }
    return it->second;
  }

  static bool Assigns(const Frame& f, const std::string& name) {
    return f.assigned != nullptr &&
           std::find(f.assigned->begin(), f.assigned->end(), name) != f.assigned->end();
  }

  Value Lookup(const std::string& name) const {
    const size_t innermost = frames_.size() - 1;
    auto scan = [&](size_t i, bool* found) -> Value {
      for (const auto& [k, v] : frames_[i].vars) {
        if (k == name) {
          *found = true;
          return v;
        }
      }
      if (i != innermost && Assigns(frames_[i], name)) {
        *found = true;
        return Value::Undefined(name);
      }
      return Value();
    };
    bool found = false;
    for (size_t i = frames_.size(); i-- > base_;) {
      Value v = scan(i, &found);
      if (found) return v;
    }
    if (base_ > 0) {
      Value v = scan(0, &found);
      if (found) return v;
    }
    if (const Value* v = context_.Find(name)) return *v;
    return Global(name);
  }

  void Store(const std::string& name, Value value) {
    Frame& f = frames_.back();
    for (auto& [k, v] : f.vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    f.vars.emplace_back(name, std::move(value));
  }

  Value Global(const std::string& name) const {
    if (name == "raise_exception") {
      return Value::Function(name, [](CallArgs& args) -> StatusOr<Value> {
        std::string msg;
        if (!args.positional.empty()) {
          KVINDEX_ASSIGN_OR_RETURN(msg, PyStr(args.positional[0]));
        }
        return absl::InvalidArgumentError(absl::StrCat(kRaisedPrefix, msg));
      });
    }
    if (name == "strftime_now") {
      return Value::Function(name, [](CallArgs& args) -> StatusOr<Value> {
        if (args.positional.size() != 1 || !args.positional[0].is_string()) {
          return TypeError("strftime_now() takes one format string");
        }
        const std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        const std::string& fmt = args.positional[0].str();
        if (fmt.empty()) return Value::String("");
        std::string buf(256 + fmt.size() * 8, '\0');
        const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
        if (n == 0)
          return absl::UnimplementedError("chat template: unsupported strftime_now format");
        buf.resize(n);
        return Value::String(std::move(buf));
      });
    }
    if (name == "namespace" || name == "dict") {
      const bool ns = name == "namespace";
      return Value::Function(name, [ns](CallArgs& args) -> StatusOr<Value> {
        Dict d;
        for (const Value& p : args.positional) {
          if (!p.is_dict())
            return TypeError("namespace()/dict() positional argument must be a dict");
          for (const auto& [k, v] : p.dict().entries) d.Set(k, v);
        }
        if (args.positional.size() > 1)
          return TypeError("namespace()/dict() takes at most one positional argument");
        for (const auto& [k, v] : args.keyword) d.Set(k, v);
        return ns ? Value::Namespace(std::move(d)) : Value::MakeDict(std::move(d));
      });
    }
    if (name == "range") {
      return Value::Function(name, [](CallArgs& args) -> StatusOr<Value> {
        int64_t v[3] = {0, 0, 1};
        const size_t n = args.positional.size();
        if (n < 1 || n > 3 || !args.keyword.empty())
          return TypeError("range expected 1 to 3 integer arguments");
        for (size_t i = 0; i < n; ++i) {
          const Value& a = args.positional[i];
          if (a.kind() != K::kInt && a.kind() != K::kBool)
            return TypeError("range() integer arguments expected");
        }
        if (n == 1) {
          v[1] = args.positional[0].int_value();
        } else {
          v[0] = args.positional[0].int_value();
          v[1] = args.positional[1].int_value();
          if (n == 3) v[2] = args.positional[2].int_value();
        }
        if (v[2] == 0)
          return absl::InvalidArgumentError("ValueError: range() arg 3 must not be zero");
        std::vector<Value> out;
        for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
          if (out.size() >= 100000)
            return absl::ResourceExhaustedError("chat template: range too long");
          out.push_back(Value::Int(i));
          if ((v[2] > 0 && i > INT64_MAX - v[2]) || (v[2] < 0 && i < INT64_MIN - v[2])) break;
        }
        return Value::List(std::move(out));
      });
    }
    if (name == "lipsum" || name == "cycler" || name == "joiner") {
      return Value::Function(name, [name](CallArgs&) -> StatusOr<Value> {
        return absl::UnimplementedError(
            absl::StrCat("chat template: unsupported global function '", name, "'"));
      });
    }
    return Value::Undefined(name);
  }

  Status Step() {
    if (++steps_ > limits_.max_steps)
      return absl::ResourceExhaustedError("chat template: too many steps");
    return absl::OkStatus();
  }

  StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.children.size(); ++i) {
      KVINDEX_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i]));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [k, ex] : e.kwargs) {
      KVINDEX_ASSIGN_OR_RETURN(Value v, Eval(*ex));
      args.keyword.emplace_back(k, std::move(v));
    }
    return args;
  }

  StatusOr<Value> Eval(const Expr& e) {
    switch (e.kind) {
      case EK::kLiteral:
        return e.literal;
      case EK::kName:
        return Lookup(e.name);
      case EK::kList:
      case EK::kTuple: {
        std::vector<Value> items;
        for (const auto& c : e.children) {
          KVINDEX_ASSIGN_OR_RETURN(Value v, Eval(*c));
          items.push_back(std::move(v));
        }
        return e.kind == EK::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
      }
      case EK::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          KVINDEX_ASSIGN_OR_RETURN(Value k, Eval(*e.children[i]));
          KVINDEX_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i + 1]));
          if (!k.is_string())
            return absl::UnimplementedError("chat template: unsupported non-string dict key");
          d.Set(k.str(), std::move(v));
        }
        return Value::MakeDict(std::move(d));
      }
      case EK::kGetAttr: {
        KVINDEX_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
        return GetAttr(obj, e.name);
      }
      case EK::kGetItem: {
        KVINDEX_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
        KVINDEX_ASSIGN_OR_RETURN(Value key, Eval(*e.children[1]));
        return GetItem(obj, key);
      }
      case EK::kSlice: {
        KVINDEX_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
        Value parts[3] = {Value::None(), Value::None(), Value::None()};
        for (int k = 0; k < 3; ++k) {
          if (e.children[static_cast<size_t>(k) + 1]) {
            KVINDEX_ASSIGN_OR_RETURN(parts[k], Eval(*e.children[static_cast<size_t>(k) + 1]));
          }
        }
        return GetSlice(obj, parts[0], parts[1], parts[2]);
      }
      case EK::kCall: {
        KVINDEX_ASSIGN_OR_RETURN(Value fn, Eval(*e.children[0]));
        KVINDEX_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
        if (fn.is_undefined()) return UndefinedError(fn);
        if (fn.kind() != K::kCallable)
          return TypeError(absl::StrCat("'", fn.TypeName(), "' object is not callable"));
        return fn.callable().fn(args);
      }
      case EK::kFilter: {
        KVINDEX_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
        KVINDEX_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
        return ApplyFilter(e.name, v, args);
      }
      case EK::kTest: {
        KVINDEX_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
        KVINDEX_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
        KVINDEX_ASSIGN_OR_RETURN(bool r, ApplyTest(e.name, v, args));
        return Value::Bool(r != e.negated);
      }
      case EK::kNeg:
      case EK::kPos: {
        KVINDEX_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
        if (v.is_undefined()) return UndefinedError(v);
        if (v.kind() == K::kFloat)
          return Value::Float(e.kind == EK::kNeg ? -v.float_value() : v.float_value());
        if (v.kind() == K::kInt || v.kind() == K::kBool) {
          if (e.kind == EK::kPos) return Value::Int(v.int_value());
          if (v.int_value() == INT64_MIN) return Overflow();
          return Value::Int(-v.int_value());
        }
        return TypeError(absl::StrCat("bad operand type for unary ", e.kind == EK::kNeg ? "-" : "+",
                                      ": '", v.TypeName(), "'"));
      }
      case EK::kNot: {
        KVINDEX_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
        return Value::Bool(!v.Truthy());
      }
      case EK::kBinary: {
        KVINDEX_ASSIGN_OR_RETURN(Value a, Eval(*e.children[0]));
        KVINDEX_ASSIGN_OR_RETURN(Value b, Eval(*e.children[1]));
        return Arithmetic(e.name, a, b);
      }
      case EK::kCompare: {
        KVINDEX_ASSIGN_OR_RETURN(Value left, Eval(*e.children[0]));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          KVINDEX_ASSIGN_OR_RETURN(Value right, Eval(*e.children[i + 1]));
          const std::string& op = e.ops[i];
          bool r = false;
          if (op == "==") {
            r = PyEquals(left, right);
          } else if (op == "!=") {
            r = !PyEquals(left, right);
          } else if (op == "in" || op == "notin") {
            KVINDEX_ASSIGN_OR_RETURN(r, Contains(right, left));
            if (op == "notin") r = !r;
          } else {
            if (left.is_undefined()) return UndefinedError(left);
            if (right.is_undefined()) return UndefinedError(right);
            bool less = false;
            if (op == "<" || op == ">=") {
              KVINDEX_RETURN_IF_ERROR(PyLess(left, right, &less));
              r = op == "<" ? less : !less;
            } else {
              KVINDEX_RETURN_IF_ERROR(PyLess(right, left, &less));
              r = op == ">" ? less : !less;
            }
          }
          if (!r) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case EK::kAnd:
      case EK::kOr: {
        KVINDEX_ASSIGN_OR_RETURN(Value a, Eval(*e.children[0]));
        if (a.Truthy() == (e.kind == EK::kOr)) return a;
        return Eval(*e.children[1]);
      }
      case EK::kCondExpr: {
        KVINDEX_ASSIGN_OR_RETURN(Value cond, Eval(*e.children[0]));
        if (cond.Truthy()) return Eval(*e.children[1]);
        if (e.children[2]) return Eval(*e.children[2]);
        return Value::Undefined("conditional expression without else");
      }
    }
    return absl::InternalError("unknown expression");
  }

  Status Append(std::string& out, std::string_view s) {
    if (out.size() + s.size() > limits_.max_output_bytes) {
      return absl::ResourceExhaustedError("chat template: output too large");
    }
    out.append(s);
    return absl::OkStatus();
  }

  Status Assign(const std::vector<std::string>& targets, Value value) {
    if (targets.size() == 1) {
      Store(targets[0], std::move(value));
      return absl::OkStatus();
    }
    KVINDEX_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    if (items.size() != targets.size()) {
      return absl::InvalidArgumentError(absl::StrCat("ValueError: cannot unpack ", items.size(),
                                                     " values into ", targets.size(), " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) Store(targets[i], std::move(items[i]));
    return absl::OkStatus();
  }

  StatusOr<Flow> ExecBody(const Body& body, std::string& out) {
    for (const Node& n : body) {
      KVINDEX_RETURN_IF_ERROR(Step());
      KVINDEX_ASSIGN_OR_RETURN(Flow flow, Exec(n, out));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  StatusOr<Flow> Exec(const Node& n, std::string& out) {
    switch (n.kind) {
      case NK::kText:
        KVINDEX_RETURN_IF_ERROR(Append(out, n.text));
        return Flow::kNormal;
      case NK::kOutput: {
        KVINDEX_ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
        KVINDEX_ASSIGN_OR_RETURN(std::string s, PyStr(v));
        KVINDEX_RETURN_IF_ERROR(Append(out, s));
        return Flow::kNormal;
      }
      case NK::kIf:
        for (size_t i = 0; i < n.conditions.size(); ++i) {
          KVINDEX_ASSIGN_OR_RETURN(Value cond, Eval(*n.conditions[i]));
          if (cond.Truthy()) return ExecBody(n.bodies[i], out);
        }
        return ExecBody(n.else_body, out);
      case NK::kFor:
        return ExecFor(n, out);
      case NK::kSet: {
        KVINDEX_ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
        if (!n.attr.empty()) {
          const Value ns = Lookup(n.targets[0]);
          if (ns.kind() != K::kNamespace) {
            return absl::InvalidArgumentError(
                "TemplateRuntimeError: cannot assign attribute on non-namespace object");
          }
          ns.mutable_namespace().Set(n.attr, std::move(v));
          return Flow::kNormal;
        }
        KVINDEX_RETURN_IF_ERROR(Assign(n.targets, std::move(v)));
        return Flow::kNormal;
      }
      case NK::kSetBlock: {
        std::string captured;
        KVINDEX_ASSIGN_OR_RETURN(Flow flow, ExecBody(n.body, captured));
        (void)flow;
        Store(n.targets[0], Value::String(std::move(captured)));
        return Flow::kNormal;
      }
      case NK::kMacro: {
        const Node* node = &n;
        Store(n.text, Value::Function(
                          n.text, [this, node](CallArgs& args) { return CallMacro(*node, args); }));
        return Flow::kNormal;
      }
      case NK::kBreak:
        if (loop_depth_ == 0) return absl::InvalidArgumentError("'break' outside a loop");
        return Flow::kBreak;
      case NK::kContinue:
        if (loop_depth_ == 0) return absl::InvalidArgumentError("'continue' outside a loop");
        return Flow::kContinue;
      case NK::kGeneration:
        return ExecBody(n.body, out);
    }
    return absl::InternalError("unknown statement");
  }

  StatusOr<Flow> ExecFor(const Node& n, std::string& out) {
    KVINDEX_ASSIGN_OR_RETURN(Value iterable, Eval(*n.expr));
    KVINDEX_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(iterable));
    if (n.filter) {
      std::vector<Value> kept;
      for (Value& item : items) {
        frames_.emplace_back();
        Status s = Assign(n.targets, item);
        StatusOr<Value> keep = s.ok() ? Eval(*n.filter) : StatusOr<Value>(s);
        frames_.pop_back();
        if (!keep.ok()) return keep.status();
        if (keep->Truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return ExecBody(n.else_body, out);
    const auto length = static_cast<int64_t>(items.size());
    Value cycle_items;
    ++loop_depth_;
    const int saved_loop_depth = loop_depth_;
    for (int64_t i = 0; i < length; ++i) {
      KVINDEX_RETURN_IF_ERROR(Step());
      Dict loop;
      loop.entries.reserve(12);
      loop.Set("index", Value::Int(i + 1));
      loop.Set("index0", Value::Int(i));
      loop.Set("revindex", Value::Int(length - i));
      loop.Set("revindex0", Value::Int(length - i - 1));
      loop.Set("first", Value::Bool(i == 0));
      loop.Set("last", Value::Bool(i == length - 1));
      loop.Set("length", Value::Int(length));
      loop.Set("depth", Value::Int(1));
      loop.Set("depth0", Value::Int(0));
      loop.Set("previtem",
               i > 0 ? items[static_cast<size_t>(i - 1)] : Value::Undefined("loop.previtem"));
      loop.Set("nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)]
                                          : Value::Undefined("loop.nextitem"));
      loop.Set("cycle", Value::Function("cycle", [i](CallArgs& args) -> StatusOr<Value> {
                 if (args.positional.empty()) return TypeError("no items for cycling given");
                 return args.positional[static_cast<size_t>(i) % args.positional.size()];
               }));
      frames_.push_back(Frame{{}, &AssignedIn(n.body)});
      Store("loop", Value::MakeDict(std::move(loop)));
      Status assigned = Assign(n.targets, items[static_cast<size_t>(i)]);
      StatusOr<Flow> flow = assigned.ok() ? ExecBody(n.body, out) : StatusOr<Flow>(assigned);
      frames_.pop_back();
      loop_depth_ = saved_loop_depth;
      if (!flow.ok()) {
        --loop_depth_;
        return flow.status();
      }
      if (*flow == Flow::kBreak) break;
    }
    --loop_depth_;
    return Flow::kNormal;
  }

  StatusOr<Value> CallMacro(const Node& n, CallArgs& args) {
    if (call_depth_ >= limits_.max_call_depth)
      return absl::ResourceExhaustedError("chat template: macro recursion too deep");
    if (args.positional.size() > n.params.size()) {
      return TypeError(absl::StrCat("macro '", n.text, "' takes not more than ", n.params.size(),
                                    " argument(s)"));
    }
    for (const auto& [k, v] : args.keyword) {
      bool known = false;
      for (const auto& p : n.params) known = known || p.first == k;
      if (!known)
        return TypeError(absl::StrCat("macro '", n.text, "' takes no keyword argument '", k, "'"));
    }
    const size_t saved_base = base_;
    const int saved_loop_depth = loop_depth_;
    frames_.push_back(Frame{{}, &AssignedIn(n.body)});
    base_ = frames_.size() - 1;
    loop_depth_ = 0;
    ++call_depth_;
    Status status;
    for (size_t i = 0; i < n.params.size() && status.ok(); ++i) {
      const auto& [name, def] = n.params[i];
      if (i < args.positional.size()) {
        Store(name, args.positional[i]);
      } else if (const Value* kw = args.Keyword(name)) {
        Store(name, *kw);
      } else if (def) {
        StatusOr<Value> v = Eval(*def);
        if (v.ok()) {
          Store(name, *std::move(v));
        } else {
          status = v.status();
        }
      } else {
        Store(name, Value::Undefined(name));
      }
    }
    std::string rendered;
    if (status.ok()) {
      StatusOr<Flow> flow = ExecBody(n.body, rendered);
      if (!flow.ok()) status = flow.status();
    }
    --call_depth_;
    loop_depth_ = saved_loop_depth;
    frames_.resize(base_);
    base_ = saved_base;
    if (!status.ok()) return status;
    return Value::String(std::move(rendered));
  }

  const Dict& context_;
  const RenderLimits& limits_;
  std::vector<Frame> frames_;
  std::unordered_map<const Body*, std::vector<std::string>> assigned_;
  size_t base_ = 0;
  size_t steps_ = 0;
  int loop_depth_ = 0;
  int call_depth_ = 0;
};

}  // namespace

StatusOr<std::string> RenderTemplate(const Body& body, const Dict& context,
                                     const RenderLimits& limits) {
  Renderer renderer(context, limits);
  return renderer.Run(body);
}

}  // namespace kvindex::chat_template
