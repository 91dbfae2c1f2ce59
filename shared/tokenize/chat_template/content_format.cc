// ChatTemplate::IteratesMessageContent: vLLM's detection of a template's
// content format ("auto" resolution in vllm/entrypoints/chat_utils.py,
// _detect_content_format), on our syntax tree. A template is "openai" when
// it has a for loop over the content of a message, a message being a loop
// variable over `messages` or over a name assigned from it (directly,
// through filters, tests or slices); otherwise "string". Where vLLM's walk
// meets a shape it asserts against (a tuple target), it falls back to its
// default, "string", and so does this.
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "shared/tokenize/chat_template/ast.h"
#include "shared/tokenize/chat_template/chat_template.h"

namespace kvindex::chat_template {
namespace {

bool IsVar(const Expr& e, const std::string& name) {
  return e.kind == Expr::Kind::kName && e.name == name;
}

bool IsAttr(const Expr& e, const std::string& name, const std::string& key) {
  if (e.kind == Expr::Kind::kGetItem) {
    const Expr& arg = *e.children[1];
    return IsVar(*e.children[0], name) && arg.kind == Expr::Kind::kLiteral &&
           arg.literal.kind() == Value::Kind::kString && arg.literal.str() == key;
  }
  if (e.kind == Expr::Kind::kGetAttr) return IsVar(*e.children[0], name) && e.name == key;
  return false;
}

// vLLM's _is_var_or_elems_access: `name` (or name[key] / name.key), possibly
// filtered, tested or sliced.
bool IsVarOrElems(const Expr& e, const std::string& name, const std::string* key) {
  if (e.kind == Expr::Kind::kFilter || e.kind == Expr::Kind::kTest ||
      e.kind == Expr::Kind::kSlice) {
    return IsVarOrElems(*e.children[0], name, key);
  }
  return key != nullptr ? IsAttr(e, name, *key) : IsVar(e, name);
}

// Every node of the tree in document order (Jinja2's find_all).
void Collect(const Body& body, std::vector<const Node*>* out) {
  for (const Node& n : body) {
    out->push_back(&n);
    Collect(n.body, out);
    for (const Body& b : n.bodies) Collect(b, out);
    Collect(n.else_body, out);
  }
}

}  // namespace

bool ChatTemplate::IteratesMessageContent() const {
  std::vector<const Node*> nodes;
  Collect(*body_, &nodes);
  // Names bound to `messages` or to a part of it.
  std::vector<std::string> message_lists{"messages"};
  std::deque<std::string> pending{"messages"};
  std::set<std::string> seen{"messages"};
  while (!pending.empty()) {
    const std::string name = pending.front();
    pending.pop_front();
    for (const Node* n : nodes) {
      if (n->kind != Node::Kind::kSet || !IsVarOrElems(*n->expr, name, nullptr)) continue;
      if (n->targets.size() != 1 || !n->attr.empty()) return false;  // vLLM asserts: default
      if (seen.insert(n->targets[0]).second) {
        message_lists.push_back(n->targets[0]);
        pending.push_back(n->targets[0]);
      }
    }
  }
  // Loop variables over those lists: a message.
  std::vector<std::string> messages;
  for (const Node* n : nodes) {
    if (n->kind != Node::Kind::kFor) continue;
    for (const std::string& list : message_lists) {
      if (!IsVarOrElems(*n->expr, list, nullptr)) continue;
      if (n->targets.size() != 1) return false;
      messages.push_back(n->targets[0]);
      break;
    }
  }
  // A loop over a message's content.
  static const std::string kContent = "content";
  for (const Node* n : nodes) {
    if (n->kind != Node::Kind::kFor) continue;
    for (const std::string& message : messages) {
      if (!IsVarOrElems(*n->expr, message, &kContent)) continue;
      return n->targets.size() == 1;
    }
  }
  return false;
}

}  // namespace kvindex::chat_template
