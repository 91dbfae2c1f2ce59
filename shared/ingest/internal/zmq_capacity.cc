#include "shared/ingest/internal/zmq_capacity.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shared/base/strings.h"
#include "shared/log/log.h"

namespace kvindex::ingest::internal {
namespace {

constexpr int kSocketsPerSource = 4;
constexpr int kSlackSockets = 32;
constexpr uint64_t kFdsPerSource = 6;
constexpr uint64_t kReserveFds = 256;
constexpr int kZmqDefaultMaxSockets = 1023;

}  // namespace

ZmqBudget BudgetFor(size_t sources) {
  ZmqBudget budget;
  budget.sockets = static_cast<int>(
      std::min<uint64_t>(uint64_t{sources} * kSocketsPerSource + kSlackSockets, 1u << 30));
  budget.file_descriptors = uint64_t{sources} * kFdsPerSource + kReserveFds;
  return budget;
}

Status SizeZmqContext(zmq::context_t& context, size_t sources) {
  const ZmqBudget budget = BudgetFor(sources);
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(strings::Cat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  }
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < budget.file_descriptors) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY
                          ? budget.file_descriptors
                          : std::min<rlim_t>(limit.rlim_max, budget.file_descriptors);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      log::Get("ingest")->info("{} source(s): raised the open-file limit from {} to {}", sources,
                               limit.rlim_cur, raised.rlim_cur);
      limit = raised;
    }
  }
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < budget.file_descriptors) {
    return absl::FailedPreconditionError(strings::Cat(
        sources, " source(s) need about ", budget.file_descriptors, " file descriptors (",
        budget.sockets, " ZMQ sockets); this process may open ", limit.rlim_cur, " (hard limit ",
        limit.rlim_max == RLIM_INFINITY ? std::string("unlimited") : strings::Cat(limit.rlim_max),
        "): raise it (ulimit -n, LimitNOFILE= in systemd, the container runtime's nofile "
        "ulimit) or split the sources over more agents"));
  }
  const int max_sockets = std::max(kZmqDefaultMaxSockets, budget.sockets);
  if (zmq_ctx_set(context.handle(), ZMQ_MAX_SOCKETS, max_sockets) != 0) {
    return absl::FailedPreconditionError(strings::Cat(
        "ZMQ_MAX_SOCKETS ", max_sockets, " for ", sources, " source(s): ", zmq_strerror(errno),
        " (libzmq allows at most ", zmq_ctx_get(context.handle(), ZMQ_SOCKET_LIMIT), ")"));
  }
  return absl::OkStatus();
}

}  // namespace kvindex::ingest::internal
