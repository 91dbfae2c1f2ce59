// How many ZMQ sockets and file descriptors the agent's sources need, and the
// ZMQ context sized for them. libzmq caps a context at 1,023 sockets by
// default (ZMQ_MAX_SOCKETS), about 340 sources at three sockets each, and
// reports the cap as "Too many open files", which sends operators after the
// wrong limit.
//
//   zmq::context_t context(1);
//   KVINDEX_RETURN_IF_ERROR(internal::SizeZmqContext(context, sources.size()));
//
// Thread safety: call before the context has any socket, from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <zmq.hpp>

#include "shared/base/status.h"

namespace kvindex::ingest::internal {

struct ZmqBudget {
  // Sockets the context must allow: a SUB socket, its disconnect monitor
  // (two PAIR sockets) and a replay DEALER per source, plus slack.
  int sockets = 0;
  // File descriptors the process needs for them (one mailbox per socket, one
  // TCP connection per SUB and replay socket) plus a reserve for NATS, HTTP
  // and the rest of the process.
  uint64_t file_descriptors = 0;
};

ZmqBudget BudgetFor(size_t sources);

// Raises the soft RLIMIT_NOFILE towards the hard one when the budget needs
// it, then sets ZMQ_MAX_SOCKETS to fit (never below libzmq's default).
// FailedPrecondition naming the sources, the descriptors needed and the
// process's limits when the hard limit is too low.
Status SizeZmqContext(zmq::context_t& context, size_t sources);

}  // namespace kvindex::ingest::internal
