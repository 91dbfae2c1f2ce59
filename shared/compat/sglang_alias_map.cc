#include "shared/compat/sglang_alias_map.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "shared/base/bytes.h"

namespace kvindex::compat {

SglangAliasMap::SglangAliasMap(const index::IndexInterface* index, SglangAliasOptions options)
    : index_(index), options_(options) {}

SglangAliasMap::~SglangAliasMap() = default;

bool SglangAliasMap::Held(std::string_view model, uint64_t canonical) const {
  // A one-block lookup finds a sequence hash wherever it sits in a chain.
  StatusOr<index::MatchResult> result =
      index_->MatchSequenceHashes(model, std::span<const uint64_t>(&canonical, 1));
  return result.ok() && !result->workers.empty();
}

SglangAliasMap::ModelAliases* SglangAliasMap::ModelOf(std::string_view model, bool create) {
  auto it = models_.find(absl::string_view(model.data(), model.size()));
  if (it == models_.end()) {
    if (!create) return nullptr;
    it = models_.emplace(std::string(model), std::make_unique<ModelAliases>()).first;
  }
  return it->second.get();
}

void SglangAliasMap::Add(ModelAliases& aliases, const PlacementEvent& event) {
  for (size_t i = 0; i < event.block_hashes.size(); ++i) {
    const uint64_t sglang = event.sglang_hashes[i];
    const uint64_t canonical = event.block_hashes[i];
    if (aliases.closed || aliases.poisoned.contains(sglang)) {
      ++stats_.refused_poisoned;
      continue;
    }
    auto forward = aliases.forward.find(sglang);
    if (forward != aliases.forward.end() && forward->second == canonical) {
      continue;  // known (another source stored the same block)
    }
    auto reverse = aliases.reverse.find(canonical);
    if (forward == aliases.forward.end() && reverse == aliases.reverse.end()) {
      if (aliases.forward.size() >= options_.max_entries) {
        ++stats_.refused_full;
        continue;
      }
      aliases.forward.emplace(sglang, canonical);
      aliases.reverse.emplace(canonical, sglang);
      ++stats_.entries;
      ++stats_.added;
      continue;
    }
    // A conflict: neither side is trusted any more (fail closed).
    ++stats_.conflicts;
    const std::optional<uint64_t> other_block =
        forward != aliases.forward.end() ? std::optional<uint64_t>(forward->second) : std::nullopt;
    const std::optional<uint64_t> other_sglang =
        reverse != aliases.reverse.end() ? std::optional<uint64_t>(reverse->second) : std::nullopt;
    if (other_block.has_value()) EraseCanonical(aliases, *other_block);
    if (other_sglang.has_value()) EraseCanonical(aliases, canonical);
    Poison(aliases, sglang);
    if (other_sglang.has_value()) Poison(aliases, *other_sglang);
  }
}

void SglangAliasMap::Poison(ModelAliases& aliases, uint64_t sglang) {
  if (aliases.poisoned.size() >= options_.max_poisoned) {
    aliases.closed = true;  // cannot remember it: learn nothing more
    return;
  }
  if (aliases.poisoned.insert(sglang).second) ++stats_.poisoned;
}

void SglangAliasMap::EraseCanonical(ModelAliases& aliases, uint64_t canonical) {
  auto it = aliases.reverse.find(canonical);
  if (it == aliases.reverse.end()) return;
  aliases.forward.erase(it->second);
  aliases.reverse.erase(it);
  --stats_.entries;
  ++stats_.removed;
}

void SglangAliasMap::NoteGone(std::string_view model, std::span<const uint64_t> hashes,
                              bool departed) {
  if (hashes.empty()) return;
  if (gone_runs_.empty() || gone_models_[gone_runs_.back().model] != model ||
      gone_runs_.back().departed != departed) {
    size_t m = 0;
    while (m < gone_models_used_ && gone_models_[m] != model) ++m;
    if (m == gone_models_used_) {
      if (m == gone_models_.size()) gone_models_.emplace_back();
      gone_models_[m].assign(model.data(), model.size());
      ++gone_models_used_;
    }
    gone_runs_.push_back({m, gone_hashes_.size(), gone_hashes_.size(), departed});
  }
  gone_hashes_.insert(gone_hashes_.end(), hashes.begin(), hashes.end());
  gone_runs_.back().end = gone_hashes_.size();
}

void SglangAliasMap::OnApplied(std::span<const PlacementEvent> events) {
  {
    WriterLock lock(&mu_);
    for (const PlacementEvent& event : events) {
      if (event.kind != PlacementKind::kStored || event.sglang_hashes.empty()) continue;
      if (event.sglang_hashes.size() != event.block_hashes.size()) {
        ++stats_.refused_mismatch;
        continue;
      }
      Add(*ModelOf(event.model, /*create=*/true), event);
    }
  }
  // The blocks the index reported leaving it (removals, clears, expiries) or
  // not taking, looked at after the adds above, so a block aliased and then
  // cleared in one message is looked at too. After every message each alias
  // names a held block, so a removal that leaves its block held by someone
  // needs no look: one that does not is reported.
  bool stores = false;
  for (const PlacementEvent& event : events) {
    stores |= event.kind == PlacementKind::kStored && !event.block_hashes.empty();
  }
  candidates_.clear();
  if (!gone_runs_.empty()) {
    ReaderLock lock(&mu_);
    for (const GoneRun& run : gone_runs_) {
      const std::string& model = gone_models_[run.model];
      auto it = models_.find(model);
      if (it == models_.end() || it->second->reverse.empty()) continue;
      ModelAliases* aliases = it->second.get();
      // A block that left the index is still gone after the message unless
      // the message stored something (it may have come back); one not taken
      // may be held by another source.
      const bool look = !run.departed || stores;
      for (size_t i = run.begin; i < run.end; ++i) {
        if (aliases->reverse.contains(gone_hashes_[i])) {
          candidates_.push_back({aliases, model, gone_hashes_[i], look});
        }
      }
    }
  }
  // Only this thread changes the map: it reads it here without the
  // exclusive lock while the index is looked up, and takes that lock only to
  // erase what nobody holds any more (a block may have come back).
  erase_.clear();
  for (const Candidate& candidate : candidates_) {
    if (!candidate.look || !Held(candidate.model, candidate.canonical)) {
      erase_.push_back(&candidate);
    }
  }
  if (!erase_.empty()) {
    WriterLock lock(&mu_);
    for (const Candidate* candidate : erase_) {
      EraseCanonical(*candidate->aliases, candidate->canonical);
    }
  }
  ForgetGone();
}

void SglangAliasMap::ForgetGone() {
  // Kept for the next message, unless a big clear (or a checkpoint restore
  // that failed and emptied the index) grew it past what messages need.
  constexpr size_t kKeptHashes = size_t{1} << 16;
  constexpr size_t kKeptModels = 64;
  gone_runs_.clear();
  gone_hashes_.clear();
  if (gone_hashes_.capacity() > kKeptHashes) gone_hashes_ = {};
  gone_models_used_ = 0;
  if (gone_models_.size() > kKeptModels) gone_models_.resize(kKeptModels);
}

void SglangAliasMap::Clear() {
  ForgetGone();
  WriterLock lock(&mu_);
  for (auto& [name, aliases] : models_) {
    stats_.removed += aliases->forward.size();
    aliases->forward.clear();
    aliases->reverse.clear();
  }
  stats_.entries = 0;
  // The poisoned hashes stay: they came from the log, which the new index
  // state does not undo.
}

namespace {
// SaveState's layout: u8 version, varint models, per model: string name,
// u8 closed, varint aliases, (fixed64 sglang, fixed64 canonical) each,
// varint poisoned, fixed64 each.
constexpr uint8_t kStateVersion = 1;
}  // namespace

std::string SglangAliasMap::SaveState() const {
  ReaderLock lock(&mu_);
  std::string out;
  size_t size = 16;
  for (const auto& [name, aliases] : models_) {
    size += name.size() + 24 + 16 * aliases->forward.size() + 8 * aliases->poisoned.size();
  }
  out.reserve(size);
  out.push_back(static_cast<char>(kStateVersion));
  bytes::PutVarint(&out, models_.size());
  for (const auto& [name, aliases] : models_) {
    bytes::PutString(&out, name);
    out.push_back(aliases->closed ? 1 : 0);
    bytes::PutVarint(&out, aliases->forward.size());
    for (const auto& [sglang, canonical] : aliases->forward) {
      bytes::PutFixed64(&out, sglang);
      bytes::PutFixed64(&out, canonical);
    }
    bytes::PutVarint(&out, aliases->poisoned.size());
    for (uint64_t sglang : aliases->poisoned) bytes::PutFixed64(&out, sglang);
  }
  return out;
}

Status SglangAliasMap::RestoreState(std::string_view state) {
  absl::flat_hash_map<std::string, std::unique_ptr<ModelAliases>> models;
  uint64_t entries = 0, poisoned = 0;
  auto decode = [&]() -> Status {
    if (state.empty()) return absl::OkStatus();
    bytes::Reader in(state, "SGLang alias map");
    uint8_t version = 0;
    KVINDEX_RETURN_IF_ERROR(in.Byte(&version, "version"));
    if (version != kStateVersion) {
      return absl::DataLossError(
          absl::StrCat("SGLang alias map: state version ", version, " (this build reads 1)"));
    }
    uint64_t count = 0;
    KVINDEX_RETURN_IF_ERROR(in.Count(&count, 4, "models"));
    for (uint64_t m = 0; m < count; ++m) {
      std::string name;
      KVINDEX_RETURN_IF_ERROR(in.String(&name, "model"));
      auto [it, added] = models.try_emplace(std::move(name), std::make_unique<ModelAliases>());
      if (!added) return absl::DataLossError("SGLang alias map: a model saved twice");
      ModelAliases& aliases = *it->second;
      uint8_t closed = 0;
      KVINDEX_RETURN_IF_ERROR(in.Byte(&closed, "closed"));
      aliases.closed = closed != 0;
      uint64_t n = 0;
      KVINDEX_RETURN_IF_ERROR(in.Count(&n, 16, "aliases"));
      if (n > options_.max_entries) {
        return absl::DataLossError("SGLang alias map: more aliases than a model holds");
      }
      aliases.forward.reserve(n);
      aliases.reverse.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t sglang = 0, canonical = 0;
        KVINDEX_RETURN_IF_ERROR(in.Fixed64(&sglang, "SGLang hash"));
        KVINDEX_RETURN_IF_ERROR(in.Fixed64(&canonical, "canonical hash"));
        if (!aliases.forward.emplace(sglang, canonical).second ||
            !aliases.reverse.emplace(canonical, sglang).second) {
          return absl::DataLossError("SGLang alias map: a hash aliased twice");
        }
      }
      KVINDEX_RETURN_IF_ERROR(in.Count(&n, 8, "poisoned"));
      if (n > options_.max_poisoned) {
        return absl::DataLossError("SGLang alias map: more poisoned hashes than a model holds");
      }
      aliases.poisoned.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t sglang = 0;
        KVINDEX_RETURN_IF_ERROR(in.Fixed64(&sglang, "poisoned hash"));
        if (!aliases.poisoned.insert(sglang).second || aliases.forward.contains(sglang)) {
          return absl::DataLossError("SGLang alias map: a poisoned hash saved twice or aliased");
        }
      }
      entries += aliases.forward.size();
      poisoned += aliases.poisoned.size();
    }
    if (!in.done()) return absl::DataLossError("SGLang alias map: trailing bytes");
    return absl::OkStatus();
  };
  Status status = decode();
  ForgetGone();  // of the index before the restore
  if (!status.ok()) {
    models.clear();  // fail closed: nothing of a damaged state
    entries = poisoned = 0;
  }
  WriterLock lock(&mu_);
  models_ = std::move(models);
  stats_.entries = entries;
  stats_.poisoned = poisoned;
  return status;
}

size_t SglangAliasMap::Translate(std::string_view model, std::span<uint64_t> hashes) const {
  ReaderLock lock(&mu_);
  auto it = models_.find(absl::string_view(model.data(), model.size()));
  if (it == models_.end() || it->second->forward.empty()) return 0;
  const absl::flat_hash_map<uint64_t, uint64_t>& forward = it->second->forward;
  size_t translated = 0;
  for (uint64_t& hash : hashes) {
    auto alias = forward.find(hash);
    if (alias == forward.end()) continue;
    hash = alias->second;
    ++translated;
  }
  return translated;
}

std::optional<uint64_t> SglangAliasMap::Find(std::string_view model, uint64_t sglang) const {
  ReaderLock lock(&mu_);
  auto it = models_.find(absl::string_view(model.data(), model.size()));
  if (it == models_.end()) return std::nullopt;
  auto alias = it->second->forward.find(sglang);
  if (alias == it->second->forward.end()) return std::nullopt;
  return alias->second;
}

SglangAliasStats SglangAliasMap::Stats() const {
  ReaderLock lock(&mu_);
  SglangAliasStats stats = stats_;
  constexpr uint64_t kSlot = sizeof(std::pair<uint64_t, uint64_t>) + 1;
  for (const auto& [name, aliases] : models_) {
    stats.bytes += kSlot * (aliases->forward.capacity() + aliases->reverse.capacity()) +
                   (sizeof(uint64_t) + 1) * aliases->poisoned.capacity();
  }
  return stats;
}

std::vector<SglangAlias> SglangAliasMap::Entries() const {
  std::vector<SglangAlias> out;
  {
    ReaderLock lock(&mu_);
    for (const auto& [name, aliases] : models_) {
      for (const auto& [sglang, canonical] : aliases->forward) {
        out.push_back({name, sglang, canonical});
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kvindex::compat
