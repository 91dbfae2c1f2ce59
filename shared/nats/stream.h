// The JetStream stream that carries placement events: creating or updating it
// (EnsureStream), reading its state (GetStreamState), and the mapping from
// cnats errors to kvindex Status codes (FromNats).
//
//   nats::StreamOptions stream;      // "KVINDEX", subjects "kvindex.events.>"
//   stream.replicas = 3;             // a 3-node JetStream cluster
//   KVINDEX_RETURN_IF_ERROR(nats::EnsureStream(connection->jetstream(), stream));
//   KVINDEX_ASSIGN_OR_RETURN(auto state, nats::GetStreamState(connection->jetstream(),
//   stream.name));
//
// Thread safety: the functions are thread safe (they share nothing but the
// jsCtx, which cnats makes thread safe).
#pragma once

#include <nats/nats.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"
#include "shared/nats/subjects.h"

namespace kvindex::nats {

struct StreamOptions {
  // Stream name: [A-Za-z0-9_-]. Default: "KVINDEX".
  std::string name = "KVINDEX";
  // Subject scheme; the stream stores subjects.StreamSubjects().
  // Default: prefix "kvindex.events".
  SubjectScheme subjects;
  // Copies of every message, 1..5; 3 for a 3-node cluster. Can only change when
  // the server allows it (FailedPrecondition otherwise). Default: 1.
  int replicas = 1;
  // Messages older than this are dropped; routers rebuild from checkpoints
  // younger than this. 0 = keep forever. Default: 24h.
  std::chrono::milliseconds max_age{std::chrono::hours(24)};
  // Cap on stored bytes, oldest messages dropped first; -1 = unlimited.
  // Sizing: roughly (placement events per second) x (~60 bytes per event
  // + subject + 60 bytes of JetStream overhead per message) x max_age, per
  // replica. Default: -1.
  int64_t max_bytes = -1;
  // Window in which a repeated Nats-Msg-Id is dropped as a duplicate; must
  // cover the publisher's retry horizon. Default: 2min.
  std::chrono::milliseconds duplicate_window{std::chrono::minutes(2)};
  // Memory instead of file storage (tests, throwaway caches). Cannot change
  // on an existing stream. Default: false.
  bool memory_storage = false;
  // Largest message the stream accepts, in bytes. Default: 8 MiB.
  int32_t max_msg_size = 8 << 20;
  // Whether this process owns the stream's settings. The owner (routers,
  // `kvindex-ctl stream apply`) creates the stream and changes one that
  // differs; a non-owner (agents) creates a missing stream but never changes
  // an existing one, so one agent's flags cannot cut or extend what every
  // router reads. Default: true.
  bool owns_settings = true;

  // InvalidArgument naming the flag (--stream, --stream-prefix, ...).
  Status Validate() const;
};

// Creates the stream, or (options.owns_settings) updates it when its config
// differs in an updatable field (subjects, max_age, max_bytes,
// duplicate_window, max_msg_size, replicas), logging a WARN naming the fields.
// Without owns_settings an existing stream is left as it is: each differing
// field (storage included) is logged in one WARN and appended to *mismatch
// (when given) as "max_bytes (stream 1048576, flags 20000)"; the call is OK.
// Idempotent, and safe when several processes call it at once. Unavailable
// when NATS or JetStream cannot be reached (retry with backoff);
// FailedPrecondition when the server refuses a change (a replicas change
// answered with any JetStream error, e.g. "no suitable peers"; a storage
// change), with the server's text; InvalidArgument for bad options.
Status EnsureStream(jsCtx* js, const StreamOptions& options,
                    std::vector<std::string>* mismatch = nullptr);

struct StreamState {
  uint64_t first_seq = 0;
  uint64_t last_seq = 0;
  uint64_t messages = 0;
  uint64_t bytes = 0;
};

// The stream's current counters. NotFound when no such stream exists.
StatusOr<StreamState> GetStreamState(jsCtx* js, const std::string& name);

// Maps a cnats status (and the JetStream error code, when there is one) to a
// Status whose code follows kvindex retry semantics: timeouts, no server,
// closed/not yet connected, no responders -> Unavailable; auth failures and
// NATS_NOT_PERMITTED -> PermissionDenied; NATS_NOT_FOUND / stream not found ->
// NotFound; name already in use -> AlreadyExists; changes the server refuses
// (replicas, resources) and TLS errors -> FailedPrecondition; others Internal.
// The message is "<what>: <status text>[ (jetstream error N)]: <nats_GetLastError>".
// OK when s == NATS_OK.
Status FromNats(natsStatus s, std::string_view what, jsErrCode code = static_cast<jsErrCode>(0));

}  // namespace kvindex::nats
