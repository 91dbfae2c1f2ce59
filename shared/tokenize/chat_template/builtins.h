// Jinja2's filters, tests, attribute/item lookup and the Python methods
// (str, dict) the supported templates call, with the semantics Jinja2 3.1
// and Python 3 give them. The Is* predicates are the parser's allow-lists:
// a name outside them is refused when the template is parsed.
#pragma once

#include <string>
#include <string_view>

#include "shared/base/status.h"
#include "shared/tokenize/chat_template/value.h"

namespace kvindex::chat_template {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);
bool IsKnownMethod(std::string_view name);

StatusOr<Value> ApplyFilter(std::string_view name, const Value& value, const CallArgs& args);
StatusOr<bool> ApplyTest(std::string_view name, const Value& value, const CallArgs& args);

// obj.name: for dicts a dict method (items, get, ...) first, then the key;
// for strings the str methods; missing -> undefined; on undefined an error.
StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
// obj[key]: the key first, then (string keys) the attribute.
StatusOr<Value> GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] (null Values = omitted) on lists, tuples and strings.
StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                         const Value& step);

// The items a for loop (or list()) visits: list/tuple items, dict keys,
// string code points; undefined -> none.
StatusOr<std::vector<Value>> Iterate(const Value& value);

// `needle in haystack`.
StatusOr<bool> Contains(const Value& haystack, const Value& needle);

// Error for using an undefined value where Jinja2 raises UndefinedError.
Status UndefinedError(const Value& undefined);

}  // namespace kvindex::chat_template
