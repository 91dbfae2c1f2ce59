// The subject scheme of the kvindex placement stream on NATS JetStream.
//
// Every subject starts with a configurable prefix (default "kvindex.events").
// Placement events of one (model, node) pair go to prefix.<model>.<node>, with
// both names encoded into a single subject token by EncodeToken; agent-level
// traffic (heartbeats, model-less events) and routers' expiry decisions use
// control tokens that start with '_', which no encoded name can produce.
//
//   nats::SubjectScheme scheme;  // prefix "kvindex.events"
//   scheme.Events("meta-llama/Llama-3.1-8B", "node-1")
//       // -> "kvindex.events.meta-llama%2FLlama-3%2E1-8B.node-1"
//   scheme.Agent("node-1")   // -> "kvindex.events._agent.node-1"
//   scheme.StreamSubjects()  // -> "kvindex.events.>"
//
// Thread safety: everything here is a pure function or a const method.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "shared/base/status.h"

namespace kvindex::nats {

// Encodes an arbitrary string into one NATS subject token: bytes in
// [A-Za-z0-9-] are kept, every other byte (including '_' and '%') becomes '%'
// and two uppercase hex digits. The result never contains '.', '*', '>' or
// whitespace and never starts with '_'. Reversible with DecodeToken. An empty
// input gives an empty string (not a valid token; callers reject empty names).
std::string EncodeToken(std::string_view text);

// Inverse of EncodeToken. InvalidArgument when the token is empty, contains a
// byte EncodeToken never emits, or a '%' not followed by two uppercase hex
// digits, or an escape of a byte that EncodeToken keeps as is (so every
// decodable token has exactly one spelling).
StatusOr<std::string> DecodeToken(std::string_view token);

// Longest model token on a subject (bytes). NATS refuses a control line past
// 4 KiB (max_control_line), and a subject past it stops the publishing
// connection, so every subject must stay far below.
inline constexpr size_t kMaxModelTokenBytes = 192;
// Longest node token and subject prefix: a longer --node or --stream-prefix
// is refused (ValidateSubjectNames) rather than shortened, since routers read
// the node back from the subject.
inline constexpr size_t kMaxNodeTokenBytes = 256;
inline constexpr size_t kMaxPrefixBytes = 256;

// The subject token of a model: EncodeToken(model) when it is at most
// kMaxModelTokenBytes, else a bounded token that names the model by a hash:
// the encoding's first 96 bytes (never a cut escape), '~', then 32 hex digits
// of SHA-256(model). '~' is never produced by EncodeToken, so the two forms
// cannot collide; routers read the model from the message, never from this
// token. Agents and routers both build subjects through SubjectScheme, so
// they agree.
std::string ModelToken(std::string_view model);
// Whether `token` is one ModelToken can produce (either form): what a router
// accepts in the model place of an events subject.
bool IsModelToken(std::string_view token);

// InvalidArgument naming the flag when the prefix or the node cannot make a
// subject NATS accepts (see kMaxNodeTokenBytes, kMaxPrefixBytes, ValidatePrefix).
Status ValidateSubjectNames(std::string_view prefix, std::string_view node);

// OK when `prefix` is non-empty tokens of [A-Za-z0-9_-] separated by single
// dots (no wildcards, no empty tokens); InvalidArgument naming it otherwise.
Status ValidatePrefix(std::string_view prefix);

struct SubjectScheme {
  // Subject prefix of every placement subject; see ValidatePrefix.
  // Default: "kvindex.events".
  std::string prefix = "kvindex.events";

  // The stream's subject filter: prefix + ".>".
  std::string StreamSubjects() const;
  // Placement events of `model` on `node`: prefix.<ModelToken(model)>.<EncodeToken(node)>.
  std::string Events(std::string_view model, std::string_view node) const;
  // Heartbeats and model-less events of the agent on `node`: prefix._agent.<node token>.
  std::string Agent(std::string_view node) const;
  // Expiry decisions routers append for `node`: prefix._expire.<node token>.
  std::string Expire(std::string_view node) const;
  // Everything a router consumes; the same as StreamSubjects().
  std::string All() const;
};

}  // namespace kvindex::nats
