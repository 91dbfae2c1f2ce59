// NextBySubject: where the next message of one filter subject is stored in a
// JetStream stream, asked with `$JS.API.STREAM.MSG.GET.<stream>`
// `{"seq": S, "next_by_subj": F}` (nats-server 2.9+). What a reader with a
// subject filter uses to know positions it is never given
// (FilteredLogReader, JetStreamLogReader's stall check): a stream stores
// positions in order, so an answer t proves no message of F at [S, t), and
// "no message found" proves none from S to the stream's end at the time of
// the question. Routers need publish permission on that API subject
// (docs/security.md).
//
//   StatusOr<uint64_t> next = NextBySubject(connection->raw(), "KVINDEX", 12,
//                                           "kvindex.events._agent.*");
//   // 0: none stored at or after 12; else the position of the first one.
//
// Thread safety: as natsConnection_Request (any thread).
#pragma once

#include <nats/nats.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "shared/base/status.h"

namespace kvindex::consume {

// The position of the first message of `subject` (a filter, wildcards
// allowed) at or after `seq` in `stream`, 0 when there is none. Unavailable
// when NATS does not answer in `timeout`; Internal for an answer that is not
// the API's.
StatusOr<uint64_t> NextBySubject(natsConnection* connection, const std::string& stream,
                                 uint64_t seq, const std::string& subject,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(2));

}  // namespace kvindex::consume
