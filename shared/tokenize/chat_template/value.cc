#include "shared/tokenize/chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "shared/tokenize/chat_template/text.h"

namespace kvindex::chat_template {

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(std::string key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Keyword(std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::Undefined(std::string name) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::List(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}
Value Value::LazyList(std::vector<Value> items, Lazy lazy) {
  Value v = List(std::move(items));
  v.lazy_ = lazy;
  return v;
}

Value Value::Tuple(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}
Value Value::MakeDict(Dict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(dict));
  return v;
}
Value Value::Namespace(Dict dict) {
  Value v = MakeDict(std::move(dict));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::Function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Float(static_cast<double>(u));
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      dict.entries.reserve(json.size());
      for (const auto& [k, v] : json.items()) dict.entries.emplace_back(k, FromJson(v));
      return MakeDict(std::move(dict));
    }
    default:
      return None();
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
    case Kind::kTuple:
      return lazy_ == Lazy::kGenerator || !list_->empty();  // a generator object is always true
    case Kind::kDict:
      return !dict_->entries.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

bool PyEquals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.float_value() == b.float_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind() || a.lazy() != Value::Lazy::kNo || b.lazy() != Value::Lazy::kNo) {
    return false;  // list vs tuple too: Python says [1] != (1,); generators compare by identity
  }
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kList:
    case K::kTuple: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!PyEquals(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case K::kDict: {
      if (a.dict().entries.size() != b.dict().entries.size()) return false;
      for (const auto& [k, v] : a.dict().entries) {
        const Value* other = b.dict().Find(k);
        if (other == nullptr || !PyEquals(v, *other)) return false;
      }
      return true;
    }
    case K::kNamespace:
      return &a.mutable_namespace() == &b.mutable_namespace();
    case K::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

Status PyLess(const Value& a, const Value& b, bool* less) {
  using K = Value::Kind;
  if (a.lazy() != Value::Lazy::kNo || b.lazy() != Value::Lazy::kNo) {
    return absl::InvalidArgumentError(
        "TypeError: ordering comparison with a generator or dict view");
  }
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) {
      *less = a.float_value() < b.float_value();
    } else {
      *less = a.int_value() < b.int_value();
    }
    return absl::OkStatus();
  }
  if (a.is_string() && b.is_string()) {
    *less = a.str() < b.str();  // UTF-8 byte order is code point order
    return absl::OkStatus();
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (PyEquals(x[i], y[i])) continue;
      return PyLess(x[i], y[i], less);
    }
    *less = x.size() < y.size();
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

std::string PyFloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp10 + 1;
  std::string out = sign;
  if (decpt <= -4 || decpt > 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&out, ".", digits.substr(1));
    const int ae = std::abs(exp10);
    absl::StrAppend(&out, "e", exp10 < 0 ? "-" : "+", ae < 10 ? "0" : "", ae);
  } else if (decpt <= 0) {
    absl::StrAppend(&out, "0.", std::string(static_cast<size_t>(-decpt), '0'), digits);
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    absl::StrAppend(&out, digits, std::string(static_cast<size_t>(decpt) - digits.size(), '0'),
                    ".0");
  } else {
    absl::StrAppend(&out, digits.substr(0, static_cast<size_t>(decpt)), ".",
                    digits.substr(static_cast<size_t>(decpt)));
  }
  return out;
}

namespace {

StatusOr<std::string> PyReprString(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) {
      return absl::UnimplementedError(
          "Python repr() of a non-ASCII string (printing a list or dict holding one)");
    }
    if (ch == quote || ch == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(ch);
    }
  }
  out.push_back(quote);
  return out;
}

StatusOr<std::string> PyRepr(const Value& value) {
  if (value.is_string()) return PyReprString(value.str());
  return PyStr(value);
}

}  // namespace

StatusOr<std::string> PyStr(const Value& value) {
  using K = Value::Kind;
  switch (value.kind()) {
    case K::kUndefined:
      return std::string();
    case K::kNone:
      return std::string("None");
    case K::kBool:
      return std::string(value.bool_value() ? "True" : "False");
    case K::kInt:
      return absl::StrCat(value.int_value());
    case K::kFloat:
      return PyFloatRepr(value.float_value());
    case K::kString:
      return value.str();
    case K::kList:
    case K::kTuple: {
      if (value.lazy() != Value::Lazy::kNo) {
        return absl::UnimplementedError(
            "chat template: unsupported printing of a generator, iterator or dict view (Python "
            "prints its repr)");
      }
      const bool tuple = value.kind() == K::kTuple;
      std::string out(tuple ? "(" : "[");
      for (size_t i = 0; i < value.items().size(); ++i) {
        if (i > 0) out += ", ";
        KVINDEX_ASSIGN_OR_RETURN(std::string item, PyRepr(value.items()[i]));
        out += item;
      }
      if (tuple && value.items().size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case K::kDict: {
      std::string out("{");
      bool first = true;
      for (const auto& [k, v] : value.dict().entries) {
        if (!first) out += ", ";
        first = false;
        KVINDEX_ASSIGN_OR_RETURN(std::string key, PyReprString(k));
        KVINDEX_ASSIGN_OR_RETURN(std::string item, PyRepr(v));
        absl::StrAppend(&out, key, ": ", item);
      }
      out += "}";
      return out;
    }
    case K::kNamespace:
      return absl::UnimplementedError("chat template: unsupported printing of a namespace object");
    case K::kCallable:
      return absl::UnimplementedError(
          absl::StrCat("chat template: unsupported printing of a function object (",
                       value.callable().name, ")"));
  }
  return std::string();
}

namespace {

void JsonString(const std::string& s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t start = i;
      const char32_t cp = NextCodePoint(s, i);
      if (!ensure_ascii) {
        out.append(s, start, i - start);
        continue;
      }
      char buf[16];
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

Status JsonDump(const Value& value, const JsonOptions& o, int level, std::string& out) {
  using K = Value::Kind;
  const std::string item_sep = o.has_separators ? o.item_separator : (o.has_indent ? "," : ", ");
  const std::string key_sep = o.has_separators ? o.key_separator : ": ";
  auto newline = [&](int lvl) {
    if (!o.has_indent) return;
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += o.indent;
  };
  switch (value.kind()) {
    case K::kNone:
      out += "null";
      return absl::OkStatus();
    case K::kBool:
      out += value.bool_value() ? "true" : "false";
      return absl::OkStatus();
    case K::kInt:
      absl::StrAppend(&out, value.int_value());
      return absl::OkStatus();
    case K::kFloat: {
      const double f = value.float_value();
      if (std::isnan(f)) {
        out += "NaN";
      } else if (std::isinf(f)) {
        out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        out += PyFloatRepr(f);
      }
      return absl::OkStatus();
    }
    case K::kString:
      JsonString(value.str(), o.ensure_ascii, out);
      return absl::OkStatus();
    case K::kList:
    case K::kTuple: {
      if (value.lazy() != Value::Lazy::kNo) {
        return absl::InvalidArgumentError(
            "TypeError: tojson: a generator or dict view is not JSON serializable");
      }
      if (value.items().empty()) {
        out += "[]";
        return absl::OkStatus();
      }
      out.push_back('[');
      for (size_t i = 0; i < value.items().size(); ++i) {
        if (i > 0) out += item_sep;
        newline(level + 1);
        KVINDEX_RETURN_IF_ERROR(JsonDump(value.items()[i], o, level + 1, out));
      }
      newline(level);
      out.push_back(']');
      return absl::OkStatus();
    }
    case K::kDict: {
      if (value.dict().entries.empty()) {
        out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : value.dict().entries) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += item_sep;
        newline(level + 1);
        JsonString(entries[i]->first, o.ensure_ascii, out);
        out += key_sep;
        KVINDEX_RETURN_IF_ERROR(JsonDump(entries[i]->second, o, level + 1, out));
      }
      newline(level);
      out.push_back('}');
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tojson: Object of type ", value.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

StatusOr<std::string> PyJsonDumps(const Value& value, const JsonOptions& options) {
  std::string out;
  KVINDEX_RETURN_IF_ERROR(JsonDump(value, options, 0, out));
  return out;
}

}  // namespace kvindex::chat_template
