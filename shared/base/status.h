// Status and StatusOr: the one error type of kvindex.
//
// Every fallible call returns absl::Status or absl::StatusOr<T>. Codes follow
// retry semantics (docs/architecture.md): Unavailable = retry with backoff,
// InvalidArgument/FailedPrecondition = fix the input, DataLoss = rebuild.
// Dropping an error on purpose is spelled `.IgnoreError()` with a comment.
//
//   KVINDEX_RETURN_IF_ERROR(DoThing());
//   KVINDEX_ASSIGN_OR_RETURN(auto value, ComputeValue());
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvindex {

using Status = absl::Status;
template <typename T>
using StatusOr = absl::StatusOr<T>;

}  // namespace kvindex

#define KVINDEX_STATUS_CONCAT_INNER_(a, b) a##b
#define KVINDEX_STATUS_CONCAT_(a, b) KVINDEX_STATUS_CONCAT_INNER_(a, b)

#define KVINDEX_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status kvindex_status_ = (expr);           \
    if (!kvindex_status_.ok()) return kvindex_status_; \
  } while (0)

#define KVINDEX_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()

#define KVINDEX_ASSIGN_OR_RETURN(lhs, expr) \
  KVINDEX_ASSIGN_OR_RETURN_IMPL_(KVINDEX_STATUS_CONCAT_(kvindex_statusor_, __LINE__), lhs, expr)
