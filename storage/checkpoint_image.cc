#include "storage/checkpoint_image.h"

#include <algorithm>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace kvindex::storage {

uint64_t CheckpointImage::total_entries() const {
  uint64_t total = 0;
  for (uint64_t n : entries) total += n;
  return total;
}

Status CheckpointImage::Verify() const {
  uint64_t digest_sum = 0;
  uint64_t counted[kNumTiers] = {};
  for (const CheckpointRun& run : runs) {
    if (run.model >= models.size() || run.source >= sources.size() || run.begin > run.end ||
        run.end > hashes.size() || static_cast<int>(run.tier) >= kNumTiers) {
      return absl::DataLossError("checkpoint run out of range");
    }
    digest_sum +=
        index::EntriesDigest(models[run.model].name, sources[run.source], run.tier, Hashes(run));
    counted[static_cast<int>(run.tier)] += run.end - run.begin;
  }
  for (int t = 0; t < kNumTiers; ++t) {
    if (counted[t] != entries[t]) {
      return absl::DataLossError(absl::StrCat("checkpoint holds ", counted[t], " ",
                                              std::string(TierName(static_cast<Tier>(t))),
                                              " entries, ", entries[t], " recorded"));
    }
  }
  if (digest_sum != digest) {
    return absl::DataLossError(
        absl::StrCat("checkpoint digest ", absl::Hex(digest_sum, absl::kZeroPad16),
                     " differs from the recorded ", absl::Hex(digest, absl::kZeroPad16)));
  }
  return absl::OkStatus();
}

CheckpointImage CaptureManifest(const consume::AgentTable* agents) {
  CheckpointImage image;
  if (agents != nullptr) image.agents = agents->Agents();
  image.created_unix_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  return image;
}

CheckpointImage CaptureCheckpoint(const index::IndexInterface& index,
                                  const consume::AgentTable* agents) {
  CheckpointImage image = CaptureManifest(agents);
  StatusOr<std::unique_ptr<index::IndexCapture>> capture = index.BeginCapture();
  if (!capture.ok()) return image;  // another capture open: a caller's bug (tests only)
  const index::IndexCapture& c = **capture;
  image.applied_seq = c.stats().applied_seq;
  image.digest = c.stats().digest;
  std::copy(std::begin(c.stats().entries), std::end(c.stats().entries), std::begin(image.entries));
  for (const index::IndexCapture::Model& m : c.models()) {
    image.models.push_back({m.name, m.block_size, m.blocks});
  }
  image.hashes.reserve(image.total_entries());
  absl::flat_hash_map<SourceKey, uint32_t> source_ids;
  // Consecutive runs of one (model, source, tier) merge.
  (*capture)->ForEachRun([&](uint32_t model, uint32_t source_id, Tier tier,
                             std::span<const uint64_t> hashes) {
    const SourceKey& source = c.models()[model].sources[source_id];
    auto [it, added] = source_ids.try_emplace(source, static_cast<uint32_t>(image.sources.size()));
    if (added) image.sources.push_back(source);
    if (image.runs.empty() || image.runs.back().model != model ||
        image.runs.back().source != it->second || image.runs.back().tier != tier) {
      image.runs.push_back({model, it->second, tier, image.hashes.size(), image.hashes.size()});
    }
    image.hashes.insert(image.hashes.end(), hashes.begin(), hashes.end());
    image.runs.back().end += hashes.size();
  });
  return image;
}

StatusOr<CheckpointRestorer> CheckpointRestorer::Begin(const CheckpointImage& manifest,
                                                       index::IndexInterface* index,
                                                       uint64_t max_entries) {
  const index::IndexStats before = index->Stats();
  uint64_t held = 0;
  for (uint64_t n : before.entries) held += n;
  if (before.applied_seq != 0 || held != 0) {
    return absl::FailedPreconditionError("a checkpoint loads into an empty index only");
  }
  // The hints are a damaged or hostile manifest's to name (a peer's export
  // carries its own checksum): a model's distinct blocks are at most its
  // entries, all models' at most what the data holds (checked only once
  // it is read), so no more is reserved up front.
  uint64_t room = max_entries;
  uint64_t entries = 0;
  for (uint64_t n : manifest.entries) entries = n > UINT64_MAX - entries ? UINT64_MAX : entries + n;
  room = std::min(room, entries);
  for (const CheckpointModel& model : manifest.models) {
    const uint64_t blocks = std::min(model.blocks, room);
    if (blocks != 0) index->ReserveBlocks(model.name, blocks);
    room -= blocks;
  }
  return CheckpointRestorer(manifest, index);
}

void CheckpointRestorer::Add(std::span<const CheckpointRun> runs,
                             std::span<const uint64_t> hashes) {
  for (const CheckpointRun& run : runs) {
    has_entries_[run.model] = true;
    const CheckpointModel& model = manifest_->models[run.model];
    index_->RestoreRun(model.name, manifest_->sources[run.source], run.tier,
                       hashes.subspan(run.begin, run.end - run.begin), model.block_size);
  }
}

void CheckpointRestorer::Abort() {
  std::vector<PlacementEvent> clears(manifest_->sources.size());
  for (size_t i = 0; i < clears.size(); ++i) {
    clears[i].kind = PlacementKind::kCleared;
    clears[i].source = manifest_->sources[i];
  }
  index_->ApplyMessage(clears, index_->Stats().applied_seq + 1);
  index_->RestoreAppliedSeq(0);
}

Status CheckpointRestorer::Finish(consume::AgentTable* agents,
                                  std::chrono::steady_clock::time_point now) {
  const CheckpointImage& image = *manifest_;
  // A model known with no entries stays known (queries answer "no match",
  // not "unknown model"): an empty store at position 1, overwritten below.
  std::vector<PlacementEvent> empty_models;
  for (size_t m = 0; m < image.models.size(); ++m) {
    if (has_entries_[m]) continue;
    PlacementEvent& event = empty_models.emplace_back();
    event.kind = PlacementKind::kStored;
    event.model = image.models[m].name;
    event.block_size = image.models[m].block_size;
  }
  if (!empty_models.empty()) index_->ApplyMessage(empty_models, 1);
  index_->RestoreAppliedSeq(image.applied_seq);
  const index::IndexStats stats = index_->Stats();
  bool counts_equal = true;
  for (int t = 0; t < kNumTiers; ++t) counts_equal &= stats.entries[t] == image.entries[t];
  if (stats.digest != image.digest || !counts_equal) {
    Abort();  // fail closed
    return absl::DataLossError(
        absl::StrCat("restored digest ", absl::Hex(stats.digest, absl::kZeroPad16),
                     counts_equal ? "" : " (and entry counts)", " differs from the checkpoint's ",
                     absl::Hex(image.digest, absl::kZeroPad16)));
  }
  if (agents != nullptr) agents->Restore(image.agents, now);
  return absl::OkStatus();
}

Status RestoreCheckpoint(const CheckpointImage& image, index::IndexInterface* index,
                         consume::AgentTable* agents, std::chrono::steady_clock::time_point now) {
  KVINDEX_ASSIGN_OR_RETURN(CheckpointRestorer restorer,
                           CheckpointRestorer::Begin(image, index, image.hashes.size()));
  restorer.Add(image.runs, image.hashes);
  return restorer.Finish(agents, now);
}

}  // namespace kvindex::storage
