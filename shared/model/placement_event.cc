#include "shared/model/placement_event.h"

namespace kvindex {

std::string_view PlacementKindName(PlacementKind kind) {
  switch (kind) {
    case PlacementKind::kStored:
      return "stored";
    case PlacementKind::kRemoved:
      return "removed";
    case PlacementKind::kCleared:
      return "cleared";
    case PlacementKind::kHeartbeat:
      return "heartbeat";
    case PlacementKind::kWorkerExpired:
      return "worker_expired";
    case PlacementKind::kAgentExpired:
      return "agent_expired";
  }
  return "invalid";
}

}  // namespace kvindex
