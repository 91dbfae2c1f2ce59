#include "shared/tokenize/chat_template/builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "shared/tokenize/chat_template/text.h"

namespace kvindex::chat_template {
namespace {

using K = Value::Kind;

constexpr std::string_view kFilters[] = {
    "abs",        "capitalize", "count",  "d",          "default", "first",   "float",
    "indent",     "int",        "items",  "join",       "last",    "length",  "list",
    "lower",      "map",        "reject", "rejectattr", "replace", "reverse", "select",
    "selectattr", "string",     "sum",    "tojson",     "trim",    "upper"};
constexpr std::string_view kTests[] = {
    "defined",  "undefined",   "none",        "boolean", "true",    "false",
    "integer",  "float",       "number",      "string",  "mapping", "iterable",
    "sequence", "callable",    "eq",          "equalto", "==",      "ne",
    "!=",       "lt",          "lessthan",    "<",       "le",      "<=",
    "gt",       "greaterthan", ">",           "ge",      ">=",      "in",
    "odd",      "even",        "divisibleby", "lower",   "upper",   "sameas"};
constexpr std::string_view kStrMethods[] = {
    "strip", "lstrip",  "rstrip", "split", "startswith", "endswith",  "upper",
    "lower", "replace", "find",   "count", "join",       "capitalize"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get"};
// Attributes Python's str and list have that are not implemented here: using
// one is refused rather than treated as undefined.
constexpr std::string_view kOtherStrAttrs[] = {
    "casefold",     "center",  "encode",    "expandtabs",  "format",       "format_map",
    "index",        "isalnum", "isalpha",   "isascii",     "isdecimal",    "isdigit",
    "isidentifier", "islower", "isnumeric", "isprintable", "isspace",      "istitle",
    "isupper",      "ljust",   "maketrans", "partition",   "removeprefix", "removesuffix",
    "rfind",        "rindex",  "rjust",     "rpartition",  "rsplit",       "splitlines",
    "swapcase",     "title",   "translate", "zfill"};
constexpr std::string_view kOtherDictAttrs[] = {"clear",   "copy",       "fromkeys", "pop",
                                                "popitem", "setdefault", "update"};
constexpr std::string_view kListAttrs[] = {"append", "clear",   "copy",   "count",
                                           "extend", "index",   "insert", "pop",
                                           "remove", "reverse", "sort"};

template <size_t N>
bool In(const std::string_view (&list)[N], std::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

Status TypeError(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", std::string(what)));
}

Status Unimplemented(std::string_view what) {
  return absl::UnimplementedError(absl::StrCat("chat template: unsupported ", std::string(what)));
}

// Positional-or-keyword argument i named `name`, or nullptr.
const Value* Arg(const CallArgs& args, size_t i, std::string_view name) {
  if (i < args.positional.size()) return &args.positional[i];
  return args.Keyword(name);
}

Status CheckArgs(const CallArgs& args, std::string_view fn,
                 std::initializer_list<std::string_view> names) {
  if (args.positional.size() > names.size()) {
    return TypeError(
        absl::StrCat(std::string(fn), "() takes at most ", names.size(), " arguments"));
  }
  for (const auto& [k, v] : args.keyword) {
    if (std::find(names.begin(), names.end(), k) == names.end()) {
      return TypeError(
          absl::StrCat(std::string(fn), "() got an unexpected keyword argument '", k, "'"));
    }
  }
  return absl::OkStatus();
}

bool IsAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

StatusOr<std::string> AsciiCase(const std::string& s, bool upper, std::string_view fn) {
  if (!IsAscii(s)) return Unimplemented(absl::StrCat(std::string(fn), " of non-ASCII text"));
  std::string out = s;
  for (char& c : out) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return out;
}

StatusOr<std::string> Capitalize(const std::string& s) {
  if (!IsAscii(s)) return Unimplemented("capitalize of non-ASCII text");
  std::string out = s;
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    if (i == 0 && c >= 'a' && c <= 'z') out[i] = static_cast<char>(c - 'a' + 'A');
    if (i > 0 && c >= 'A' && c <= 'Z') out[i] = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case K::kUndefined:
      return 0;
    case K::kString:
      return static_cast<int64_t>(CodePointCount(v.str()));
    case K::kList:
    case K::kTuple:
      if (v.lazy() == Value::Lazy::kGenerator)
        return TypeError("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.items().size());
    case K::kDict:
      return static_cast<int64_t>(v.dict().entries.size());
    default:
      return TypeError(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

// Python str.split(sep=None, maxsplit=-1).
StatusOr<Value> Split(const std::string& s, const Value* sep, const Value* maxsplit_v) {
  int64_t maxsplit = -1;
  if (maxsplit_v != nullptr) {
    if (maxsplit_v->kind() != K::kInt) return TypeError("split: maxsplit must be an int");
    maxsplit = maxsplit_v->int_value();
  }
  std::vector<Value> parts;
  if (sep == nullptr || sep->is_none()) {
    size_t pos = 0;
    size_t len = 0;
    auto space_at = [&](size_t p) {
      size_t q = p;
      const bool sp = IsPySpace(NextCodePoint(s, q));
      len = q - p;
      return sp;
    };
    while (true) {
      while (pos < s.size() && space_at(pos)) pos += len;
      if (pos >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        // The rest, with trailing whitespace kept but leading removed.
        parts.push_back(Value::String(s.substr(pos)));
        break;
      }
      size_t end = pos;
      while (end < s.size() && !space_at(end)) end += len;
      parts.push_back(Value::String(s.substr(pos, end - pos)));
      pos = end;
    }
    return Value::List(std::move(parts));
  }
  if (!sep->is_string()) return TypeError("split: separator must be str or None");
  const std::string& d = sep->str();
  if (d.empty()) return absl::InvalidArgumentError("ValueError: empty separator");
  size_t pos = 0;
  while (true) {
    const size_t hit = (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)
                           ? std::string::npos
                           : s.find(d, pos);
    if (hit == std::string::npos) {
      parts.push_back(Value::String(s.substr(pos)));
      break;
    }
    parts.push_back(Value::String(s.substr(pos, hit - pos)));
    pos = hit + d.size();
  }
  return Value::List(std::move(parts));
}

// Python str.replace(old, new, count=-1).
std::string Replace(const std::string& s, const std::string& old, const std::string& repl,
                    int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {
    size_t pos = 0;
    while (pos <= s.size()) {
      if (count >= 0 && done >= count) {
        out.append(s, pos, std::string::npos);
        return out;
      }
      out += repl;
      ++done;
      if (pos == s.size()) break;
      size_t next = pos;
      NextCodePoint(s, next);
      out.append(s, pos, next - pos);
      pos = next;
    }
    return out;
  }
  size_t pos = 0;
  while (true) {
    const size_t hit = (count >= 0 && done >= count) ? std::string::npos : s.find(old, pos);
    if (hit == std::string::npos) {
      out.append(s, pos, std::string::npos);
      return out;
    }
    out.append(s, pos, hit - pos);
    out += repl;
    pos = hit + old.size();
    ++done;
  }
}

// Python's start/end arguments of find/count/startswith, clamped to the
// string, as byte offsets.
Status Range(const std::string& s, const Value* start, const Value* end, size_t* b, size_t* e) {
  const auto offsets = CodePointOffsets(s);
  const auto n = static_cast<int64_t>(offsets.size() - 1);
  auto clamp = [&](const Value* v, int64_t dflt, int64_t* out) -> Status {
    if (v == nullptr || v->is_none()) {
      *out = dflt;
      return absl::OkStatus();
    }
    if (v->kind() != K::kInt && v->kind() != K::kBool)
      return TypeError("slice indices must be integers or None");
    int64_t x = v->int_value();
    if (x < 0) x = std::max<int64_t>(0, x + n);
    *out = std::min(x, n);
    return absl::OkStatus();
  };
  int64_t bi = 0;
  int64_t ei = 0;
  KVINDEX_RETURN_IF_ERROR(clamp(start, 0, &bi));
  KVINDEX_RETURN_IF_ERROR(clamp(end, n, &ei));
  *b = offsets[static_cast<size_t>(bi)];
  *e = offsets[static_cast<size_t>(std::max(bi, ei))];
  if (ei < bi) *e = *b, *b = *b + 1;  // marks an empty, impossible range
  return absl::OkStatus();
}

StatusOr<Value> StrMethod(const std::string& s, const std::string& name, const CallArgs& args) {
  const Value* a0 = Arg(args, 0, "");
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {"chars"}));
    const Value* chars = Arg(args, 0, "chars");
    if (chars != nullptr && !chars->is_none() && !chars->is_string()) {
      return TypeError(absl::StrCat(name, " arg must be None or str"));
    }
    const std::string* set = (chars == nullptr || chars->is_none()) ? nullptr : &chars->str();
    return Value::String(PyStrip(s, set, name != "rstrip", name != "lstrip"));
  }
  if (name == "split") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {"sep", "maxsplit"}));
    return Split(s, Arg(args, 0, "sep"), Arg(args, 1, "maxsplit"));
  }
  if (name == "startswith" || name == "endswith") {
    if (!args.keyword.empty())
      return TypeError(absl::StrCat(name, "() takes no keyword arguments"));
    if (args.positional.empty() || args.positional.size() > 3)
      return TypeError(absl::StrCat(name, "() takes 1 to 3 arguments"));
    size_t b = 0;
    size_t e = 0;
    KVINDEX_RETURN_IF_ERROR(Range(s, Arg(args, 1, ""), Arg(args, 2, ""), &b, &e));
    std::vector<Value> options;
    if (a0->is_sequence() && a0->kind() == K::kTuple) {
      options = a0->items();
    } else {
      options.push_back(*a0);
    }
    for (const Value& o : options) {
      if (!o.is_string())
        return TypeError(absl::StrCat(name, " first arg must be str or a tuple of str"));
      if (e < b) continue;
      const std::string_view window(s.data() + b, e - b);
      const std::string& p = o.str();
      if (p.size() > window.size()) continue;
      if (name == "startswith" ? window.substr(0, p.size()) == p
                               : window.substr(window.size() - p.size()) == p) {
        return Value::Bool(true);
      }
    }
    return Value::Bool(false);
  }
  if (name == "upper" || name == "lower") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {}));
    KVINDEX_ASSIGN_OR_RETURN(std::string out, AsciiCase(s, name == "upper", name));
    return Value::String(std::move(out));
  }
  if (name == "capitalize") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {}));
    KVINDEX_ASSIGN_OR_RETURN(std::string out, Capitalize(s));
    return Value::String(std::move(out));
  }
  if (name == "replace") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {"old", "new", "count"}));
    const Value* old = Arg(args, 0, "old");
    const Value* repl = Arg(args, 1, "new");
    const Value* count = Arg(args, 2, "count");
    if (old == nullptr || repl == nullptr || !old->is_string() || !repl->is_string()) {
      return TypeError("replace() needs two str arguments");
    }
    if (count != nullptr && count->kind() != K::kInt)
      return TypeError("replace() count must be an int");
    return Value::String(
        Replace(s, old->str(), repl->str(), count == nullptr ? -1 : count->int_value()));
  }
  if (name == "find" || name == "count") {
    if (!args.keyword.empty())
      return TypeError(absl::StrCat(name, "() takes no keyword arguments"));
    if (args.positional.empty() || args.positional.size() > 3 || !a0->is_string()) {
      return TypeError(absl::StrCat(name, "() needs a str argument"));
    }
    size_t b = 0;
    size_t e = 0;
    KVINDEX_RETURN_IF_ERROR(Range(s, Arg(args, 1, ""), Arg(args, 2, ""), &b, &e));
    const std::string& sub = a0->str();
    if (e < b) return Value::Int(name == "find" ? -1 : 0);
    const std::string_view window(s.data() + b, e - b);
    if (name == "find") {
      const size_t hit = window.find(sub);
      if (hit == std::string_view::npos) return Value::Int(-1);
      return Value::Int(static_cast<int64_t>(CodePointCount(std::string_view(s.data(), b + hit))));
    }
    if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(window)) + 1);
    int64_t n = 0;
    for (size_t p = window.find(sub); p != std::string_view::npos;
         p = window.find(sub, p + sub.size()))
      ++n;
    return Value::Int(n);
  }
  if (name == "join") {
    if (!args.keyword.empty())
      return TypeError(absl::StrCat(name, "() takes no keyword arguments"));
    if (args.positional.size() != 1) return TypeError("join() takes exactly one argument");
    KVINDEX_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(*a0));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string())
        return TypeError(absl::StrCat("sequence item ", i, ": expected str instance"));
      if (i > 0) out += s;
      out += items[i].str();
    }
    return Value::String(std::move(out));
  }
  return Unimplemented(absl::StrCat("str method '", name, "'"));
}

StatusOr<Value> DictMethod(const Value& d, const std::string& name, const CallArgs& args) {
  if (name == "get") {
    if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 2) {
      return TypeError("get() takes 1 or 2 positional arguments");
    }
    const Value* def = Arg(args, 1, "");
    if (args.positional[0].is_string()) {
      if (const Value* v = d.dict().Find(args.positional[0].str())) return *v;
    }
    return def == nullptr ? Value::None() : *def;
  }
  if (!args.positional.empty() || !args.keyword.empty())
    return TypeError(absl::StrCat(name, "() takes no arguments"));
  std::vector<Value> out;
  for (const auto& [k, v] : d.dict().entries) {
    if (name == "keys") {
      out.push_back(Value::String(k));
    } else if (name == "values") {
      out.push_back(v);
    } else {
      out.push_back(Value::Tuple({Value::String(k), v}));
    }
  }
  return Value::LazyList(std::move(out), Value::Lazy::kDictView);
}

Value Bound(const Value& obj, const std::string& name, bool is_dict) {
  return Value::Function(name, [obj, name, is_dict](CallArgs& args) -> StatusOr<Value> {
    if (is_dict) return DictMethod(obj, name, args);
    return StrMethod(obj.str(), name, args);
  });
}

Value Refused(const std::string& what) {
  return Value::Function(what,
                         [what](CallArgs&) -> StatusOr<Value> { return Unimplemented(what); });
}

StatusOr<Value> ToJson(const Value& value, const CallArgs& args) {
  KVINDEX_RETURN_IF_ERROR(
      CheckArgs(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonOptions o;
  if (const Value* v = Arg(args, 0, "ensure_ascii")) o.ensure_ascii = v->Truthy();
  if (const Value* v = Arg(args, 1, "indent"); v != nullptr && !v->is_none()) {
    o.has_indent = true;
    if (v->kind() == K::kInt) {
      o.indent = std::string(
          static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(v->int_value(), 1000))), ' ');
    } else if (v->is_string()) {
      o.indent = v->str();
    } else {
      return Unimplemented(absl::StrCat("tojson indent of type ", v->TypeName()));
    }
  }
  if (const Value* v = Arg(args, 2, "separators"); v != nullptr && !v->is_none()) {
    if (!v->is_sequence() || v->items().size() != 2 || !v->items()[0].is_string() ||
        !v->items()[1].is_string()) {
      return TypeError("tojson separators must be a pair of strings");
    }
    o.has_separators = true;
    o.item_separator = v->items()[0].str();
    o.key_separator = v->items()[1].str();
  }
  if (const Value* v = Arg(args, 3, "sort_keys")) o.sort_keys = v->Truthy();
  KVINDEX_ASSIGN_OR_RETURN(std::string out, PyJsonDumps(value, o));
  return Value::String(std::move(out));
}

// Jinja2's indent filter: Python splitlines() separators.
StatusOr<Value> Indent(const Value& value, const CallArgs& args) {
  KVINDEX_RETURN_IF_ERROR(CheckArgs(args, "indent", {"width", "first", "blank"}));
  if (!value.is_string())
    return TypeError(absl::StrCat("indent: can only indent a str, not ", value.TypeName()));
  std::string s = value.str();
  std::string unit(4, ' ');
  if (const Value* w = Arg(args, 0, "width")) {
    if (w->is_string()) {
      unit = w->str();
    } else if (w->kind() == K::kInt) {
      unit = std::string(
          static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(w->int_value(), 1000))), ' ');
    } else {
      return TypeError("indent width must be an int or a str");
    }
  }
  const Value* first = Arg(args, 1, "first");
  const Value* blank = Arg(args, 2, "blank");
  s += "\n";
  std::vector<std::string> lines;
  std::string cur;
  for (size_t p = 0; p < s.size();) {
    const size_t start = p;
    const char32_t cp = NextCodePoint(s, p);
    const bool sep = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                     cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (sep) {
      if (cp == '\r' && p < s.size() && s[p] == '\n') ++p;
      lines.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.append(s, start, p - start);
    }
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  std::string out;
  if (blank != nullptr && blank->Truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) absl::StrAppend(&out, "\n", unit);
      out += lines[i];
    }
  } else if (!lines.empty()) {
    out = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += unit;
      out += lines[i];
    }
  }
  if (first != nullptr && first->Truthy()) out = unit + out;
  return Value::String(std::move(out));
}

StatusOr<Value> ToInt(const Value& value, const CallArgs& args) {
  if (value.is_undefined()) return UndefinedError(value);
  KVINDEX_RETURN_IF_ERROR(CheckArgs(args, "int", {"default", "base"}));
  const Value* def = Arg(args, 0, "default");
  if (const Value* base = Arg(args, 1, "base");
      base != nullptr && !(base->kind() == K::kInt && base->int_value() == 10)) {
    return Unimplemented("int filter with a base other than 10");
  }
  const Value fallback = def == nullptr ? Value::Int(0) : *def;
  switch (value.kind()) {
    case K::kBool:
    case K::kInt:
      return Value::Int(value.int_value());
    case K::kFloat: {
      const double f = value.float_value();
      if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
      return Value::Int(static_cast<int64_t>(f));
    }
    case K::kString: {
      const std::string t = PyStrip(value.str(), nullptr, true, true);
      if (t.empty() || !IsAscii(t) || t.find('_') != std::string::npos) {
        if (t.empty()) return fallback;
        return Unimplemented("int filter on this string");
      }
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(t.c_str(), &end, 10);
      if (errno == 0 && end == t.c_str() + t.size()) return Value::Int(v);
      return Unimplemented("int filter on a non-integer string");
    }
    default:
      return fallback;
  }
}

StatusOr<Value> ToFloat(const Value& value, const CallArgs& args) {
  if (value.is_undefined()) return UndefinedError(value);
  KVINDEX_RETURN_IF_ERROR(CheckArgs(args, "float", {"default"}));
  const Value* def = Arg(args, 0, "default");
  const Value fallback = def == nullptr ? Value::Float(0.0) : *def;
  switch (value.kind()) {
    case K::kBool:
    case K::kInt:
    case K::kFloat:
      return Value::Float(value.float_value());
    case K::kString:
      return Unimplemented("float filter on a string");
    default:
      return fallback;
  }
}

// Python evaluates map/select/reject/items lazily: an error in them surfaces
// only if the result is consumed. Failing eagerly could refuse a template
// Jinja2 renders, so such input is Unimplemented rather than InvalidArgument.
StatusOr<std::vector<Value>> IterateLazily(const Value& value, std::string_view filter) {
  auto items = Iterate(value);
  if (!items.ok()) {
    return Unimplemented(absl::StrCat("lazy filter '", std::string(filter), "' on a non-iterable ",
                                      value.TypeName()));
  }
  return items;
}

StatusOr<std::vector<Value>> SelectOrReject(const Value& value, const CallArgs& args, bool select,
                                            bool by_attr) {
  KVINDEX_ASSIGN_OR_RETURN(std::vector<Value> items, IterateLazily(value, "select/reject"));
  if (!args.keyword.empty()) return Unimplemented("keyword arguments of select/reject filters");
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      return TypeError("selectattr/rejectattr need an attribute name");
    }
    attr = args.positional[0].str();
    if (attr.find('.') != std::string::npos)
      return Unimplemented("dotted attribute paths in selectattr/rejectattr");
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return TypeError("the test name must be a string");
    test = args.positional[next].str();
    if (!IsKnownTest(test)) return Unimplemented(absl::StrCat("test '", test, "'"));
    test_args.positional.assign(args.positional.begin() + static_cast<long>(next) + 1,
                                args.positional.end());
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attr) {
      KVINDEX_ASSIGN_OR_RETURN(subject, GetAttr(item, attr));
    }
    bool ok = false;
    if (test.empty()) {
      ok = subject.Truthy();
    } else {
      KVINDEX_ASSIGN_OR_RETURN(ok, ApplyTest(test, subject, test_args));
    }
    if (ok == select) out.push_back(item);
  }
  return out;
}

StatusOr<Value> Map(const Value& value, const CallArgs& args) {
  KVINDEX_ASSIGN_OR_RETURN(std::vector<Value> items, IterateLazily(value, "map"));
  std::vector<Value> out;
  if (const Value* attr = args.Keyword("attribute")) {
    if (!args.positional.empty() || !attr->is_string())
      return TypeError("map(attribute=...) takes a name only");
    if (attr->str().find('.') != std::string::npos)
      return Unimplemented("dotted attribute paths in map");
    const Value* def = args.Keyword("default");
    for (const Value& item : items) {
      KVINDEX_ASSIGN_OR_RETURN(Value v, GetAttr(item, attr->str()));
      if (v.is_undefined() && def != nullptr) v = *def;
      out.push_back(std::move(v));
    }
    return Value::LazyList(std::move(out), Value::Lazy::kGenerator);
  }
  if (args.positional.empty() || !args.positional[0].is_string() || !args.keyword.empty()) {
    return TypeError("map needs a filter name or attribute=");
  }
  const std::string filter = args.positional[0].str();
  if (!IsKnownFilter(filter)) return Unimplemented(absl::StrCat("filter '", filter, "'"));
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  for (const Value& item : items) {
    KVINDEX_ASSIGN_OR_RETURN(Value v, ApplyFilter(filter, item, rest));
    out.push_back(std::move(v));
  }
  return Value::LazyList(std::move(out), Value::Lazy::kGenerator);
}

}  // namespace

Status UndefinedError(const Value& undefined) {
  return absl::InvalidArgumentError(
      absl::StrCat("UndefinedError: '", undefined.undefined_name(), "' is undefined"));
}

bool IsKnownFilter(std::string_view name) { return In(kFilters, name); }
bool IsKnownTest(std::string_view name) { return In(kTests, name); }
bool IsKnownMethod(std::string_view name) {
  return In(kStrMethods, name) || In(kDictMethods, name) || name == "cycle";
}

StatusOr<std::vector<Value>> Iterate(const Value& value) {
  switch (value.kind()) {
    case K::kUndefined:
      return std::vector<Value>();
    case K::kList:
    case K::kTuple:
      return value.items();
    case K::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, v] : value.dict().entries) keys.push_back(Value::String(k));
      return keys;
    }
    case K::kString: {
      std::vector<Value> chars;
      const std::string& s = value.str();
      for (size_t p = 0; p < s.size();) {
        const size_t start = p;
        NextCodePoint(s, p);
        chars.push_back(Value::String(s.substr(start, p - start)));
      }
      return chars;
    }
    default:
      return TypeError(absl::StrCat("'", value.TypeName(), "' object is not iterable"));
  }
}

StatusOr<bool> Contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case K::kString:
      if (!needle.is_string()) return TypeError("'in <string>' requires string as left operand");
      return haystack.str().find(needle.str()) != std::string::npos;
    case K::kList:
    case K::kTuple:
      for (const Value& item : haystack.items()) {
        if (PyEquals(item, needle)) return true;
      }
      return false;
    case K::kDict:
      if (needle.kind() == K::kList || needle.is_dict() || needle.kind() == K::kNamespace) {
        return TypeError(absl::StrCat("unhashable type: '", needle.TypeName(), "'"));
      }
      if (needle.kind() == K::kTuple) return Unimplemented("tuple key lookup in a dict");
      if (!needle.is_string()) return false;
      return haystack.dict().Find(needle.str()) != nullptr;
    case K::kUndefined:
      return false;
    default:
      return TypeError(
          absl::StrCat("argument of type '", haystack.TypeName(), "' is not iterable"));
  }
}

StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case K::kUndefined:
      return UndefinedError(obj);
    case K::kDict:
      if (In(kDictMethods, name)) return Bound(obj, name, true);
      if (In(kOtherDictAttrs, name)) return Refused(absl::StrCat("dict method '", name, "'"));
      if (const Value* v = obj.dict().Find(name)) return *v;
      return Value::Undefined(name);
    case K::kNamespace:
      if (const Value* v = obj.mutable_namespace().Find(name)) return *v;
      return Value::Undefined(name);
    case K::kString:
      if (In(kStrMethods, name)) return Bound(obj, name, false);
      if (In(kOtherStrAttrs, name)) return Refused(absl::StrCat("str method '", name, "'"));
      return Value::Undefined(name);
    case K::kList:
    case K::kTuple:
      if (In(kListAttrs, name)) return Refused(absl::StrCat("list method '", name, "'"));
      return Value::Undefined(name);
    default:
      return Value::Undefined(name);
  }
}

StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case K::kUndefined:
      return UndefinedError(obj);
    case K::kDict:
    case K::kNamespace:
      if (key.is_string()) {
        const Dict& d = obj.kind() == K::kDict ? obj.dict() : obj.mutable_namespace();
        if (const Value* v = d.Find(key.str())) return *v;
        return GetAttr(obj, key.str());
      }
      if (key.is_number() && obj.kind() == K::kDict)
        return Unimplemented("dict lookup by a non-string key");
      return Value::Undefined("item");
    case K::kList:
    case K::kTuple:
    case K::kString: {
      if (obj.lazy() != Value::Lazy::kNo) return Value::Undefined("item");
      if (key.is_string()) return GetAttr(obj, key.str());
      if (key.kind() != K::kInt && key.kind() != K::kBool) return Value::Undefined("item");
      int64_t i = key.int_value();
      if (obj.kind() == K::kString) {
        const auto offsets = CodePointOffsets(obj.str());
        const auto n = static_cast<int64_t>(offsets.size() - 1);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::Undefined("item");
        const auto u = static_cast<size_t>(i);
        return Value::String(obj.str().substr(offsets[u], offsets[u + 1] - offsets[u]));
      }
      const auto n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined("item");
      return obj.items()[static_cast<size_t>(i)];
    }
    default:
      return Value::Undefined("item");
  }
}

StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                         const Value& step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.lazy() != Value::Lazy::kNo) return Value::Undefined("slice");
  if (!obj.is_sequence() && !obj.is_string())
    return TypeError(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  auto as_int = [](const Value& v, int64_t* out) -> Status {
    if (v.is_undefined() || v.is_none()) return absl::NotFoundError("");
    if (v.kind() != K::kInt && v.kind() != K::kBool)
      return TypeError("slice indices must be integers or None");
    *out = v.int_value();
    return absl::OkStatus();
  };
  std::vector<size_t> offsets;
  int64_t n = 0;
  if (obj.is_string()) {
    offsets = CodePointOffsets(obj.str());
    n = static_cast<int64_t>(offsets.size() - 1);
  } else {
    n = static_cast<int64_t>(obj.items().size());
  }
  int64_t st = 1;
  if (Status s = as_int(step, &st); !s.ok() && !absl::IsNotFound(s)) return s;
  if (st == 0) return absl::InvalidArgumentError("ValueError: slice step cannot be zero");
  int64_t b = 0;
  int64_t e = 0;
  auto fix = [&](const Value& v, int64_t dflt, int64_t* out) -> Status {
    int64_t x = 0;
    Status s = as_int(v, &x);
    if (absl::IsNotFound(s)) {
      *out = dflt;
      return absl::OkStatus();
    }
    KVINDEX_RETURN_IF_ERROR(s);
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    *out = x;
    return absl::OkStatus();
  };
  KVINDEX_RETURN_IF_ERROR(fix(start, st < 0 ? n - 1 : 0, &b));
  KVINDEX_RETURN_IF_ERROR(fix(stop, st < 0 ? -1 : n, &e));
  std::vector<int64_t> picks;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(i);
  if (obj.is_string()) {
    std::string out;
    for (const int64_t i : picks) {
      const auto u = static_cast<size_t>(i);
      out.append(obj.str(), offsets[u], offsets[u + 1] - offsets[u]);
    }
    return Value::String(std::move(out));
  }
  std::vector<Value> out;
  for (const int64_t i : picks) out.push_back(obj.items()[static_cast<size_t>(i)]);
  return obj.kind() == K::kTuple ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

StatusOr<Value> ApplyFilter(std::string_view name, const Value& value, const CallArgs& args) {
  if (name == "tojson") return ToJson(value, args);
  if (name == "trim") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, "trim", {"chars"}));
    KVINDEX_ASSIGN_OR_RETURN(std::string s, PyStr(value));
    const Value* chars = Arg(args, 0, "chars");
    if (chars != nullptr && !chars->is_none() && !chars->is_string())
      return TypeError("trim chars must be a str");
    return Value::String(
        PyStrip(s, (chars == nullptr || chars->is_none()) ? nullptr : &chars->str(), true, true));
  }
  if (name == "length" || name == "count") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {}));
    KVINDEX_ASSIGN_OR_RETURN(int64_t n, Length(value));
    return Value::Int(n);
  }
  if (name == "default" || name == "d") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {"default_value", "boolean"}));
    const Value* def = Arg(args, 0, "default_value");
    const Value* boolean = Arg(args, 1, "boolean");
    const bool use_default =
        value.is_undefined() || (boolean != nullptr && boolean->Truthy() && !value.Truthy());
    if (!use_default) return value;
    return def == nullptr ? Value::String("") : *def;
  }
  if (name == "first" || name == "last") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {}));
    if (name == "last" && value.lazy() == Value::Lazy::kGenerator) {
      return TypeError("'generator' object is not reversible");
    }
    KVINDEX_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    if (items.empty())
      return Value::Undefined(absl::StrCat(std::string(name), " item of an empty sequence"));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, "join", {"d", "attribute"}));
    const Value* sep = Arg(args, 0, "d");
    const Value* attr = Arg(args, 1, "attribute");
    KVINDEX_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    std::string sep_s;
    if (sep != nullptr) {
      KVINDEX_ASSIGN_OR_RETURN(sep_s, PyStr(*sep));
    }
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      Value item = items[i];
      if (attr != nullptr && !attr->is_none()) {
        if (!attr->is_string()) return Unimplemented("join attribute that is not a name");
        KVINDEX_ASSIGN_OR_RETURN(item, GetAttr(item, attr->str()));
      }
      if (i > 0) out += sep_s;
      KVINDEX_ASSIGN_OR_RETURN(std::string s, PyStr(item));
      out += s;
    }
    return Value::String(std::move(out));
  }
  if (name == "items") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {}));
    if (value.is_undefined()) return Value::LazyList({}, Value::Lazy::kGenerator);
    if (!value.is_dict()) return Unimplemented("lazy filter 'items' on a non-mapping");
    KVINDEX_ASSIGN_OR_RETURN(Value items, DictMethod(value, "items", args));
    return Value::LazyList(items.items(), Value::Lazy::kGenerator);
  }
  if (name == "list") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {}));
    KVINDEX_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    return Value::List(std::move(items));
  }
  if (name == "string") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {}));
    KVINDEX_ASSIGN_OR_RETURN(std::string s, PyStr(value));
    return Value::String(std::move(s));
  }
  if (name == "lower" || name == "upper" || name == "capitalize") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {}));
    KVINDEX_ASSIGN_OR_RETURN(std::string s, PyStr(value));
    if (name == "capitalize") {
      KVINDEX_ASSIGN_OR_RETURN(std::string out, Capitalize(s));
      return Value::String(std::move(out));
    }
    KVINDEX_ASSIGN_OR_RETURN(std::string out, AsciiCase(s, name == "upper", name));
    return Value::String(std::move(out));
  }
  if (name == "replace") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {"old", "new", "count"}));
    KVINDEX_ASSIGN_OR_RETURN(std::string s, PyStr(value));
    const Value* old = Arg(args, 0, "old");
    const Value* repl = Arg(args, 1, "new");
    const Value* count = Arg(args, 2, "count");
    if (old == nullptr || repl == nullptr) return TypeError("replace needs old and new");
    KVINDEX_ASSIGN_OR_RETURN(std::string old_s, PyStr(*old));
    KVINDEX_ASSIGN_OR_RETURN(std::string new_s, PyStr(*repl));
    int64_t n = -1;
    if (count != nullptr && !count->is_none()) {
      if (count->kind() != K::kInt) return TypeError("replace count must be an int");
      n = count->int_value();
    }
    return Value::String(Replace(s, old_s, new_s, n));
  }
  if (name == "reverse") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {}));
    if (value.is_string()) return GetSlice(value, Value::None(), Value::None(), Value::Int(-1));
    if (!value.is_sequence() && !value.is_dict())
      return Unimplemented("reverse filter on this type");
    std::vector<Value> items;
    if (value.is_dict()) {
      for (const auto& [k, v] : value.dict().entries) items.push_back(Value::String(k));
    } else {
      items = value.items();
    }
    std::reverse(items.begin(), items.end());
    return Value::LazyList(std::move(items), Value::Lazy::kGenerator);
  }
  if (name == "abs") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {}));
    if (value.kind() == K::kFloat) return Value::Float(std::fabs(value.float_value()));
    if (value.kind() == K::kInt || value.kind() == K::kBool) {
      if (value.int_value() == INT64_MIN) return Unimplemented("integer overflow");
      return Value::Int(std::llabs(value.int_value()));
    }
    return TypeError(absl::StrCat("bad operand type for abs(): '", value.TypeName(), "'"));
  }
  if (name == "int") return ToInt(value, args);
  if (name == "float") return ToFloat(value, args);
  if (name == "indent") return Indent(value, args);
  if (name == "map") return Map(value, args);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    KVINDEX_ASSIGN_OR_RETURN(std::vector<Value> items,
                             SelectOrReject(value, args, name == "select" || name == "selectattr",
                                            name == "selectattr" || name == "rejectattr"));
    return Value::LazyList(std::move(items), Value::Lazy::kGenerator);
  }
  if (name == "sum") {
    KVINDEX_RETURN_IF_ERROR(CheckArgs(args, name, {"attribute", "start"}));
    if (Arg(args, 0, "attribute") != nullptr) return Unimplemented("sum(attribute=...)");
    KVINDEX_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    const Value* start = Arg(args, 1, "start");
    Value total = start == nullptr ? Value::Int(0) : *start;
    for (const Value& item : items) {
      if (!item.is_number() || !total.is_number()) return TypeError("sum of non-numbers");
      if (item.kind() == K::kFloat || total.kind() == K::kFloat) {
        total = Value::Float(total.float_value() + item.float_value());
      } else {
        int64_t r = 0;
        if (__builtin_add_overflow(total.int_value(), item.int_value(), &r))
          return Unimplemented("integer overflow");
        total = Value::Int(r);
      }
    }
    return total;
  }
  return Unimplemented(absl::StrCat("filter '", std::string(name), "'"));
}

StatusOr<bool> ApplyTest(std::string_view name, const Value& value, const CallArgs& args) {
  const bool binary = name == "eq" || name == "equalto" || name == "==" || name == "ne" ||
                      name == "!=" || name == "lt" || name == "lessthan" || name == "<" ||
                      name == "le" || name == "<=" || name == "gt" || name == "greaterthan" ||
                      name == ">" || name == "ge" || name == ">=" || name == "in" ||
                      name == "divisibleby" || name == "sameas";
  if (!args.keyword.empty()) return Unimplemented("keyword arguments to a test");
  if (args.positional.size() != (binary ? 1u : 0u)) {
    return TypeError(
        absl::StrCat("test '", std::string(name), "' takes ", binary ? 1 : 0, " argument(s)"));
  }
  if (name == "defined") return !value.is_undefined();
  if (name == "undefined") return value.is_undefined();
  if (name == "none") return value.is_none();
  if (name == "boolean") return value.kind() == K::kBool;
  if (name == "true") return value.kind() == K::kBool && value.bool_value();
  if (name == "false") return value.kind() == K::kBool && !value.bool_value();
  if (name == "integer") return value.kind() == K::kInt;
  if (name == "float") return value.kind() == K::kFloat;
  if (name == "number") return value.is_number();
  if (name == "string") return value.is_string();
  if (name == "mapping") return value.is_dict();
  if (name == "iterable")
    return value.is_undefined() || value.is_string() || value.is_sequence() || value.is_dict();
  if (name == "sequence") {
    return value.is_undefined() || value.is_string() || value.is_dict() ||
           (value.is_sequence() && value.lazy() == Value::Lazy::kNo);
  }
  if (name == "callable") return value.kind() == K::kCallable;
  if (name == "odd" || name == "even") {
    if (value.kind() != K::kInt && value.kind() != K::kBool)
      return Unimplemented("odd/even of a non-integer");
    const int64_t r = value.int_value() % 2;
    return name == "odd" ? r != 0 : r == 0;
  }
  if (name == "lower" || name == "upper") {
    if (!value.is_string()) return Unimplemented("lower/upper test of a non-string");
    if (!IsAscii(value.str())) return Unimplemented("lower/upper test of non-ASCII text");
    bool cased = false;
    for (const char c : value.str()) {
      if (name == "lower" ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z')) return false;
      cased = cased || std::isalpha(static_cast<unsigned char>(c));
    }
    return cased;
  }
  const Value& other = args.positional[0];
  if (name == "eq" || name == "equalto" || name == "==") return PyEquals(value, other);
  if (name == "ne" || name == "!=") return !PyEquals(value, other);
  if (name == "in") return Contains(other, value);
  if (name == "sameas") {
    if ((value.is_none() || value.kind() == K::kBool) ||
        (other.is_none() || other.kind() == K::kBool)) {
      return value.kind() == other.kind() && PyEquals(value, other);
    }
    return Unimplemented("sameas on objects other than None/True/False");
  }
  if (name == "divisibleby") {
    if (value.kind() != K::kInt || other.kind() != K::kInt)
      return Unimplemented("divisibleby of non-integers");
    if (other.int_value() == 0)
      return absl::InvalidArgumentError("ZeroDivisionError: integer modulo by zero");
    return value.int_value() % other.int_value() == 0;
  }
  bool less = false;
  if (name == "lt" || name == "lessthan" || name == "<") {
    KVINDEX_RETURN_IF_ERROR(PyLess(value, other, &less));
    return less;
  }
  if (name == "ge" || name == ">=") {
    KVINDEX_RETURN_IF_ERROR(PyLess(value, other, &less));
    return !less;
  }
  if (name == "gt" || name == "greaterthan" || name == ">") {
    KVINDEX_RETURN_IF_ERROR(PyLess(other, value, &less));
    return less;
  }
  if (name == "le" || name == "<=") {
    KVINDEX_RETURN_IF_ERROR(PyLess(other, value, &less));
    return !less;
  }
  return Unimplemented(absl::StrCat("test '", std::string(name), "'"));
}

}  // namespace kvindex::chat_template
