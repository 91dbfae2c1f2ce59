// The values a chat template computes with, modelled on the Python objects
// Jinja2 would hold: undefined, None, bool, int, float, str, list, tuple,
// dict (insertion-ordered, string keys), namespace() and callables (macros,
// bound methods, loop.cycle, globals). Lists and dicts are immutable once
// built (the sandbox transformers uses forbids mutating them), so copies
// share storage; a namespace is the one mutable object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "shared/base/status.h"

namespace kvindex::chat_template {

class Value;

struct Dict {
  std::vector<std::pair<std::string, Value>> entries;

  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  const Value* Keyword(std::string_view name) const;
};

using NativeFunction = std::function<StatusOr<Value>(CallArgs&)>;

struct Callable {
  std::string name;
  NativeFunction fn;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined
  static Value Undefined(std::string name);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(std::vector<Value> items);
  static Value Tuple(std::vector<Value> items);
  // What Python would hold as a lazy object rather than a list: a generator
  // or iterator (the map/select/reject/items/reverse filters) or a dict view
  // (dict.items(), keys(), values()). It iterates like a list, but printing
  // it (Python shows "<generator object ...>") is refused, and len(),
  // indexing, + and tojson behave as Python's do on such objects.
  enum class Lazy { kNo, kGenerator, kDictView };
  static Value LazyList(std::vector<Value> items, Lazy lazy);
  static Value MakeDict(Dict dict);
  static Value Namespace(Dict dict);
  static Value Function(std::string name, NativeFunction fn);
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const {
    return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat;
  }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  Lazy lazy() const { return lazy_; }

  bool bool_value() const { return b_; }
  int64_t int_value() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double float_value() const {
    return kind_ == Kind::kFloat ? f_ : static_cast<double>(int_value());
  }
  const std::string& str() const { return *s_; }
  const std::vector<Value>& items() const { return *list_; }
  const Dict& dict() const { return *dict_; }
  Dict& mutable_namespace() const { return *dict_; }
  const Callable& callable() const { return *fn_; }
  // Name of an undefined value, for error messages.
  const std::string& undefined_name() const { return *s_; }

  // Python truthiness.
  bool Truthy() const;
  // A short Python type name for error messages ("str", "list", ...).
  std::string TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  Lazy lazy_ = Lazy::kNo;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> fn_;
};

// Python's == between two values.
bool PyEquals(const Value& a, const Value& b);
// Python's <, or an error for unorderable types; *less = a < b.
Status PyLess(const Value& a, const Value& b, bool* less);

// Python's str(value) as Jinja2 prints it ({{ value }}): undefined is "",
// None "None", floats as repr. Refuses (Unimplemented) what it cannot match
// exactly: repr of non-ASCII strings inside containers, callables.
StatusOr<std::string> PyStr(const Value& value);

// Python's repr(float).
std::string PyFloatRepr(double f);

// json.dumps(value, ensure_ascii, indent, separators, sort_keys): the tojson
// filter transformers installs. indent: nullptr = none; an int or a string.
struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // the indent unit when has_indent
  bool has_separators = false;
  std::string item_separator;
  std::string key_separator;
  bool sort_keys = false;
};
StatusOr<std::string> PyJsonDumps(const Value& value, const JsonOptions& options);

}  // namespace kvindex::chat_template
