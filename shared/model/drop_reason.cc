#include "shared/model/drop_reason.h"

namespace kvindex {

std::string_view DropReasonLabel(DropReason reason) {
  switch (reason) {
    case DropReason::kNone:
      return "none";
    case DropReason::kBlockSizeMismatch:
      return "block_size_mismatch";
    case DropReason::kParentNotFound:
      return "parent_not_found";
    case DropReason::kUnresolvedPlaceholder:
      return "unresolved_placeholder";
    case DropReason::kUnknownMedium:
      return "unknown_medium";
    case DropReason::kRemoteLocality:
      return "remote_locality";
    case DropReason::kUnknownLocality:
      return "unknown_locality";
    case DropReason::kGroupFiltered:
      return "group_filtered";
    case DropReason::kBlockNotFound:
      return "block_not_found";
    case DropReason::kTokenCountMismatch:
      return "token_count_mismatch";
    case DropReason::kUnknownEvent:
      return "unknown_event";
    case DropReason::kDecodeError:
      return "decode_error";
    case DropReason::kRankOutOfRange:
      return "rank_out_of_range";
    case DropReason::kBlockCap:
      return "block_cap";
    case DropReason::kCount:
      break;
  }
  return "invalid";
}

bool DropReasonCountsBlocks(DropReason reason) {
  return reason == DropReason::kBlockNotFound || reason == DropReason::kUnresolvedPlaceholder ||
         reason == DropReason::kBlockCap;
}

}  // namespace kvindex
