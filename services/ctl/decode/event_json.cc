#include "services/ctl/decode/event_json.h"

#include <nlohmann/json.hpp>

#include "shared/model/drop_reason.h"
#include "shared/model/placement_event.h"
#include "shared/model/tier.h"

namespace kvindex::ctl {
namespace {

using json = nlohmann::ordered_json;

json OptionalStr(const std::optional<std::string_view>& value) {
  return value.has_value() ? json(std::string(*value)) : json(nullptr);
}

json OptionalInt(const std::optional<int64_t>& value) {
  return value.has_value() ? json(*value) : json(nullptr);
}

json Placement(const PlacementEvent& placement) {
  json p = {{"kind", std::string(PlacementKindName(placement.kind))},
            {"worker", placement.source.worker},
            {"dp_rank", placement.source.dp_rank}};
  if (placement.kind == PlacementKind::kStored || placement.kind == PlacementKind::kRemoved) {
    p["tier"] = std::string(TierName(placement.tier));
    p["block_hashes"] = placement.block_hashes;
  }
  if (placement.kind == PlacementKind::kStored) {
    p["parent_hash"] =
        placement.parent_hash.has_value() ? json(*placement.parent_hash) : json(nullptr);
    p["block_size"] = placement.block_size;
  }
  return p;
}

}  // namespace

void EventJsonWriter::SetBatchContext(std::string file, uint64_t batch_index, size_t payload_offset,
                                      std::optional<uint64_t> seq,
                                      std::optional<std::string_view> topic) {
  file_ = std::move(file);
  batch_index_ = batch_index;
  payload_offset_ = payload_offset;
  seq_ = seq;
  topic_.reset();
  if (topic.has_value()) topic_ = std::string(*topic);
}

void EventJsonWriter::OnBatch(const wire::EngineBatch& batch, uint32_t /*dp_rank*/) {
  ts_ = batch.ts;
  event_index_ = 0;
}

void EventJsonWriter::OnEvent(const wire::EngineEvent& event,
                              const normalize::EventOutcome& outcome) {
  json j;
  j["file"] = file_;
  j["batch"] = batch_index_;
  j["event"] = event_index_++;
  j["offset"] = payload_offset_ + event.offset;
  if (seq_.has_value()) j["seq"] = *seq_;
  if (topic_.has_value()) j["topic"] = *topic_;
  j["ts"] = ts_;
  j["dp_rank"] = outcome.dp_rank;
  // Unknown events show their tag as sent ("unknown" for a map without one).
  j["type"] = event.type != wire::EventType::kUnknown ? std::string(wire::EventTypeName(event.type))
              : event.tag.empty()                     ? std::string("unknown")
                                                      : std::string(event.tag);
  j["form"] = event.form == wire::EventForm::kMap ? "map" : "array";

  const bool stored = event.type == wire::EventType::kBlockStored;
  if (stored || event.type == wire::EventType::kBlockRemoved) {
    j["engine_hashes"] =
        std::vector<uint64_t>(event.block_hashes.begin(), event.block_hashes.end());
    j["medium"] = OptionalStr(event.medium);
    j["tier"] =
        outcome.tier.has_value() ? json(std::string(TierName(*outcome.tier))) : json(nullptr);
    j["group_idx"] = OptionalInt(event.group_idx);
    if (event.locality.has_value()) j["locality"] = std::string(*event.locality);
    if (event.ownership.has_value()) j["ownership"] = std::string(*event.ownership);
  }
  if (stored) {
    j["parent_engine_hash"] =
        event.parent_block_hash.has_value() ? json(*event.parent_block_hash) : json(nullptr);
    j["block_size"] = event.block_size;
    j["token_count"] = event.token_ids.size();
    j["token_layout"] = event.token_layout == wire::TokenLayout::kBigram ? "bigram" : "flat";
    j["lora_name"] = OptionalStr(event.lora_name);
    if (event.cache_salt.has_value()) j["cache_salt"] = std::string(*event.cache_salt);
    j["kv_cache_spec_kind"] = OptionalStr(event.kv_cache_spec_kind);
    if (event.has_extra_keys) j["extra_keys_non_nil"] = event.extra_keys_non_nil;
    j["placeholder"] = outcome.placeholder;
  }
  bool any_canonical = false;
  json canonical = json::array();
  for (const normalize::BlockOutcome& block : outcome.blocks) {
    any_canonical = any_canonical || block.canonical.has_value();
    canonical.push_back(block.canonical.has_value() ? json(*block.canonical) : json(nullptr));
  }
  if (any_canonical) {
    j["canonical_hashes"] = std::move(canonical);
    if (outcome.informational) j["canonical_informational"] = true;
  }
  j["dropped"] = outcome.drop == DropReason::kNone
                     ? json(nullptr)
                     : json(std::string(DropReasonLabel(outcome.drop)));
  if (DropReasonCountsBlocks(outcome.drop)) j["dropped_blocks"] = outcome.dropped_blocks;
  json placements = json::array();
  for (const PlacementEvent& placement : outcome.placements)
    placements.push_back(Placement(placement));
  j["placements"] = std::move(placements);
  *out_ << j.dump() << '\n';
  ++events_written_;
}

}  // namespace kvindex::ctl
