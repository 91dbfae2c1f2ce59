// EngineRegistry: what Mooncake's POST /register and /unregister (RFC #1403,
// docs/compat.md) ask of the ingest side: follow one more engine's ZMQ KV
// events, or stop following one. The HTTP codec (compat_api.cc) parses and
// bounds the request; the implementation (an embedded router's
// RegisteredEngines, services/router/embedded) validates it as a --source
// and runs it. A --nats router has none: registration belongs to agents.
//
// Status codes, which the codec maps to HTTP answers and counted outcomes:
// InvalidArgument (400: a field no --source would accept), AlreadyExists
// (409: the instance and rank are registered with other fields, or named by
// --source), ResourceExhausted (409: --max-registrations reached), NotFound
// (404: nothing registered under that instance), FailedPrecondition (409:
// /unregister of a --source instance), Unavailable (503: stopping).
//
// Thread safety: implementations are called concurrently from HTTP threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::query {

// The fields of a Mooncake /register request (RFC #1403 names in comments).
struct EngineRegistration {
  std::string endpoint;         // endpoint: the engine's ZMQ PUB socket
  std::string replay_endpoint;  // replay_endpoint: its replay ROUTER ("" = none)
  std::string type;             // type: vLLM | SGLang (Mooncake: refused)
  std::string model;            // modelname
  std::string lora_name;        // lora_name (recorded; events carry their own)
  std::string tenant_id = "default";
  std::string instance_id;  // the kvindex worker name
  uint32_t block_size = 0;
  uint32_t dp_rank = 0;
  std::string additional_salt;  // additionalsalt (recorded; events carry their own)

  friend bool operator==(const EngineRegistration&, const EngineRegistration&) = default;
};

class EngineRegistry {
 public:
  virtual ~EngineRegistry() = default;
  // Starts following the engine. OK with *created = false when the same
  // registration (every field equal) is already running: idempotent.
  virtual Status Register(const EngineRegistration& registration, bool* created) = 0;
  // Stops following the registrations of `instance_id` (of `dp_rank` only,
  // when given) and clears what they held; their ids ("instance|tenant|rank")
  // are appended to *removed.
  virtual Status Unregister(const std::string& instance_id, std::optional<uint32_t> dp_rank,
                            std::vector<std::string>* removed) = 0;
  // The registrations running now, in instance, rank order.
  virtual std::vector<EngineRegistration> Registered() const = 0;
};

}  // namespace kvindex::query
