#include "shared/consume/log_subject.h"

#include "shared/nats/subjects.h"

namespace kvindex::consume {

LogSubject ParseLogSubject(std::string_view subject) {
  LogSubject out;
  if (subject.empty()) return out;
  out.kind = LogSubject::kMalformed;
  const size_t last_dot = subject.rfind('.');
  if (last_dot == std::string_view::npos || last_dot == 0) return out;
  const size_t class_dot = subject.rfind('.', last_dot - 1);
  if (class_dot == std::string_view::npos) return out;  // no prefix
  const std::string_view node_token = subject.substr(last_dot + 1);
  const std::string_view class_token = subject.substr(class_dot + 1, last_dot - class_dot - 1);
  StatusOr<std::string> node = nats::DecodeToken(node_token);
  if (!node.ok() || class_token.empty()) return out;
  LogSubject::Kind kind;
  if (class_token == "_agent") {
    kind = LogSubject::kAgent;
  } else if (class_token == "_expire") {
    kind = LogSubject::kExpire;
  } else if (class_token[0] == '_' || !nats::IsModelToken(class_token)) {
    return out;
  } else {
    kind = LogSubject::kEvents;
  }
  out.kind = kind;
  out.node = std::move(*node);
  out.token = std::string(class_token);
  return out;
}

}  // namespace kvindex::consume
