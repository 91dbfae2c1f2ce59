#include "services/router/embedded/sglang_bridge_ingest.h"

#include <chrono>
#include <utility>
#include <vector>

#include "shared/base/strings.h"
#include "shared/query/compat_hashes.h"

namespace kvindex::router {
namespace {

using compat::SglangCode;
using compat::SglangStatus;
using Outcome = query::CompatApi::Outcome;
namespace pb = compat::pb;

SglangStatus Refuse(SglangCode code, Outcome outcome, std::string message) {
  return SglangStatus{code, outcome, std::move(message)};
}

uint64_t WallClockNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::optional<Tier> TierOf(int tier) {
  switch (tier) {
    case pb::TIER_HBM:
      return Tier::kDevice;
    case pb::TIER_DRAM:
      return Tier::kHost;
    case pb::TIER_SSD:
      return Tier::kDisk;
    default:
      return std::nullopt;
  }
}

// The whole batch, before anything is applied.
SglangStatus Check(const pb::ApplyExternalKvBatchRequest& request) {
  if (request.worker_id().empty()) {
    return Refuse(SglangCode::kInvalidArgument, Outcome::kMissingField,
                  "worker_id must not be empty");
  }
  if (request.worker_id().size() > SglangBridgeIngest::kMaxWorkerIdBytes) {
    return Refuse(SglangCode::kInvalidArgument, Outcome::kInvalidRequest,
                  strings::Cat("worker_id of ", request.worker_id().size(), " bytes; at most ",
                               SglangBridgeIngest::kMaxWorkerIdBytes));
  }
  for (char c : request.worker_id()) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Refuse(SglangCode::kInvalidArgument, Outcome::kInvalidRequest,
                    "worker_id has a control character");
    }
  }
  if (request.worker_address().size() > SglangBridgeIngest::kMaxWorkerIdBytes) {
    return Refuse(SglangCode::kInvalidArgument, Outcome::kInvalidRequest,
                  strings::Cat("worker_address of ", request.worker_address().size(),
                               " bytes; at most ", SglangBridgeIngest::kMaxWorkerIdBytes));
  }
  if (request.actions_size() > SglangBridgeIngest::kMaxActions) {
    return Refuse(SglangCode::kInvalidArgument, Outcome::kInvalidRequest,
                  strings::Cat("batch has ", request.actions_size(), " actions; at most ",
                               SglangBridgeIngest::kMaxActions));
  }
  for (int i = 0; i < request.actions_size(); ++i) {
    const pb::ExternalKvAction& action = request.actions(i);
    if (action.type() != pb::ACTION_REPORT && action.type() != pb::ACTION_REVOKE &&
        action.type() != pb::ACTION_CLEAR_ALL_AT_TIER) {
      return Refuse(SglangCode::kInvalidArgument, Outcome::kInvalidRequest,
                    strings::Cat("action ", i, ": unknown type ", static_cast<int>(action.type())));
    }
    if (!TierOf(action.tier()).has_value()) {
      return Refuse(SglangCode::kInvalidArgument, Outcome::kInvalidRequest,
                    strings::Cat("action ", i, ": tier ", static_cast<int>(action.tier()),
                                 " is not TIER_HBM, TIER_DRAM or TIER_SSD"));
    }
    if (static_cast<size_t>(action.hashes_size()) > compat::kSglangMaxHashes) {
      return Refuse(SglangCode::kInvalidArgument, Outcome::kTooManyHashes,
                    strings::Cat("action ", i, ": ", action.hashes_size(), " hashes; at most ",
                                 compat::kSglangMaxHashes));
    }
  }
  return SglangStatus{};
}

}  // namespace

SglangBridgeIngest::SglangBridgeIngest(SglangBridgeOptions options, InProcessSink* sink)
    : options_(std::move(options)), sink_(sink), next_event_id_(WallClockNs()) {}

SglangStatus SglangBridgeIngest::Apply(const pb::ApplyExternalKvBatchRequest& request) {
  if (SglangStatus s = Check(request); !s.ok()) return s;
  std::string why;
  const std::optional<std::pair<std::string, uint32_t>> model = options_.model(&why);
  if (!model.has_value()) {
    return Refuse(SglangCode::kFailedPrecondition, Outcome::kBlockSizeUnknown, why);
  }
  const SourceKey source{request.worker_id(), 0};
  MutexLock publish_lock(&publish_mu_);
  bool clear_first = false;
  bool held = false;
  bool created = false;
  {
    MutexLock lock(&mu_);
    auto it = workers_.find(request.worker_id());
    if (it == workers_.end()) {
      if (workers_.size() >= options_.max_workers) {
        return Refuse(SglangCode::kResourceExhausted, Outcome::kTooManyRegistrations,
                      strings::Cat("already ", workers_.size(), " SGLang bridge workers (at most ",
                                   options_.max_workers, ")"));
      }
      // Claimed before `reserved` is asked (below, without mu_): a
      // registration checks InUse after claiming its name, so of two racing
      // claims at least one sees the other.
      it = workers_.emplace(request.worker_id(), Worker{}).first;
      created = true;
      clear_first = true;  // whatever the log held of it before is not known to be current
    } else if (request.seq() != it->second.last_seq + 1) {
      clear_first = true;  // a gap (lost batches) or a restarted bridge
    }
    held = it->second.may_hold;
  }
  if (options_.reserved && options_.reserved(request.worker_id())) {
    MutexLock lock(&mu_);
    if (created) workers_.erase(request.worker_id());  // the claim, unused
    return Refuse(SglangCode::kFailedPrecondition, Outcome::kRegistrationConflict,
                  strings::Cat("worker_id '", request.worker_id(),
                               "' is a --source worker or a registered instance of this router"));
  }
  {
    MutexLock lock(&mu_);
    Worker& worker = workers_[request.worker_id()];
    worker.last_seq = request.seq();
    worker.address = request.worker_address();
  }

  std::vector<PlacementEvent> events;
  const uint64_t now = WallClockNs();
  uint64_t event_id = next_event_id_;  // the lambda is analysed without mu_
  auto add = [&](PlacementKind kind) -> PlacementEvent& {
    PlacementEvent& e = events.emplace_back();
    e.kind = kind;
    e.source = source;
    e.agent = options_.node;
    e.event_id = event_id++;
    e.timestamp_ns = now;
    return e;
  };
  if (clear_first) add(PlacementKind::kCleared);  // empty model: every model
  // Whether the source may hold a block once the batch is applied: false
  // after a clear with no report behind it (its slot is then given back).
  bool may_hold = !clear_first && held;
  for (const pb::ExternalKvAction& action : request.actions()) {
    const Tier tier = *TierOf(action.tier());
    if (action.type() == pb::ACTION_CLEAR_ALL_AT_TIER) {
      add(PlacementKind::kCleared);  // the whole source: an undercount at worst
      may_hold = false;
      continue;
    }
    if (action.hashes_size() == 0) continue;
    if (action.type() == pb::ACTION_REPORT) may_hold = true;
    PlacementEvent& e =
        add(action.type() == pb::ACTION_REPORT ? PlacementKind::kStored : PlacementKind::kRemoved);
    e.model = model->first;
    e.tier = tier;
    if (e.kind == PlacementKind::kStored) e.block_size = model->second;
    e.block_hashes.reserve(static_cast<size_t>(action.hashes_size()));
    for (const int64_t hash : action.hashes()) {
      e.block_hashes.push_back(query::compat::FromSglangI64(hash));
    }
  }
  next_event_id_ = event_id;
  // Without mu_: Publish waits while the log is full.
  const Status published = events.empty() ? Status() : sink_->Publish(events);
  MutexLock lock(&mu_);
  if (!published.ok() || !may_hold) {
    // A failed publish: its next batch clears first. Nothing held: the slot
    // is free for another worker (max_workers bounds the live ones); back,
    // it is a new worker (cleared first).
    workers_.erase(request.worker_id());
  } else {
    workers_[request.worker_id()].may_hold = true;
  }
  if (!published.ok()) {
    return Refuse(SglangCode::kUnavailable, Outcome::kUnavailable,
                  std::string(published.message()));
  }
  return SglangStatus{};
}

bool SglangBridgeIngest::InUse(const std::string& worker) const {
  MutexLock lock(&mu_);
  return workers_.contains(worker);
}

std::string SglangBridgeIngest::Address(const SourceKey& source) const {
  if (source.dp_rank != 0) return "";
  MutexLock lock(&mu_);
  auto it = workers_.find(source.worker);
  return it == workers_.end() ? "" : it->second.address;
}

}  // namespace kvindex::router
