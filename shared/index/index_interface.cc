#include "shared/index/index_interface.h"

#include <algorithm>

#include "shared/hashing/canonical_hash.h"
#include "shared/index/internal/entry_digest.h"

namespace kvindex::index {

size_t IndexInterface::ModelSources(std::string_view model, std::vector<SourceKey>* out) const {
  size_t count = 0;
  for (SourceInfo& info : Sources()) {
    if (info.model != model) continue;
    ++count;
    if (out != nullptr) out->push_back(std::move(info.source));
  }
  return count;
}

StatusOr<MatchResult> IndexInterface::MatchTokens(std::string_view model,
                                                  std::span<const uint32_t> tokens,
                                                  std::string_view lora_name,
                                                  std::string_view cache_salt,
                                                  const MatchOptions& options) const {
  const std::optional<uint32_t> block_size = BlockSize(model);
  if (!block_size.has_value()) {
    return absl::NotFoundError("unknown model '" + std::string(model) + "'");
  }
  if (*block_size == 0) {
    return absl::FailedPreconditionError("block size of '" + std::string(model) + "' unknown");
  }
  // Hash only what will be matched: a long prompt capped by max_blocks costs
  // max_blocks hashes, not the whole prompt.
  const size_t full_blocks = tokens.size() / *block_size;
  size_t hashed = full_blocks;
  if (options.max_blocks != 0 && options.max_blocks < hashed) hashed = options.max_blocks;
  std::vector<uint64_t> local;
  std::vector<uint64_t> seq;
  hashing::ComputeLocalHashes(tokens.first(hashed * *block_size), *block_size,
                              hashing::LocalHashSeed(lora_name, cache_salt), &local);
  hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
  StatusOr<MatchResult> result = MatchSequenceHashes(model, seq, options);
  if (result.ok()) result->blocks = static_cast<uint32_t>(full_blocks);
  return result;
}

StatusOr<MatchResult> IndexInterface::MatchLocalHashes(std::string_view model,
                                                       std::span<const uint64_t> local_hashes,
                                                       const MatchOptions& options) const {
  size_t hashed = local_hashes.size();
  if (options.max_blocks != 0 && options.max_blocks < hashed) hashed = options.max_blocks;
  std::vector<uint64_t> seq;
  hashing::ComputeSequenceHashes(local_hashes.first(hashed), std::nullopt, &seq);
  StatusOr<MatchResult> result = MatchSequenceHashes(model, seq, options);
  if (result.ok()) result->blocks = static_cast<uint32_t>(local_hashes.size());
  return result;
}

void SortWorkerMatches(std::vector<WorkerMatch>* rows) {
  std::sort(rows->begin(), rows->end(), [](const WorkerMatch& a, const WorkerMatch& b) {
    if (a.longest != b.longest) return a.longest > b.longest;
    if (a.source.worker != b.source.worker) return a.source.worker < b.source.worker;
    return a.source.dp_rank < b.source.dp_rank;
  });
}

uint64_t EntriesDigest(std::string_view model, const SourceKey& source, Tier tier,
                       std::span<const uint64_t> hashes) {
  return internal::EntryDigestSum(internal::DigestPrefix(model, source), tier, hashes.data(),
                                  hashes.size());
}

std::string EntriesDigestPrefix(std::string_view model, const SourceKey& source) {
  return internal::DigestPrefix(model, source);
}

uint64_t EntriesDigest(std::string_view prefix, Tier tier, std::span<const uint64_t> hashes) {
  return internal::EntryDigestSum(prefix, tier, hashes.data(), hashes.size());
}

void IndexInterface::ForEachRun(const RunVisitor& fn) const {
  std::string model;
  SourceKey source;
  Tier tier = Tier::kDevice;
  std::vector<uint64_t> run;
  auto flush = [&] {
    if (!run.empty()) fn(model, source, tier, run);
    run.clear();
  };
  ForEachEntry([&](std::string_view m, const SourceKey& s, Tier t, uint64_t hash) {
    if (run.empty() || m != model || !(s == source) || t != tier) {
      flush();
      model = m;
      source = s;
      tier = t;
    }
    run.push_back(hash);
  });
  flush();
}

namespace {

// The default capture: the entries copied at BeginCapture (ReferenceIndex,
// the tests' oracle; KvIndex reads its nodes in place).
class CopiedCapture final : public IndexCapture {
 public:
  explicit CopiedCapture(const IndexInterface& index) {
    stats_ = index.Stats();
    for (const std::string& name : index.Models()) {
      models_.push_back({name, index.BlockSize(name).value_or(0), index.DistinctBlocks(name), {}});
    }
    index.ForEachRun([&](std::string_view model, const SourceKey& source, Tier tier,
                         std::span<const uint64_t> hashes) {
      uint32_t m = 0;
      while (m < models_.size() && models_[m].name != model) ++m;
      if (m == models_.size()) models_.push_back({std::string(model), 0, 0, {}});
      std::vector<SourceKey>& sources = models_[m].sources;
      uint32_t s = 0;
      while (s < sources.size() && sources[s] != source) ++s;
      if (s == sources.size()) sources.push_back(source);
      runs_.push_back({m, s, tier, hashes_.size(), hashes.size()});
      hashes_.insert(hashes_.end(), hashes.begin(), hashes.end());
    });
  }
  void ForEachRun(const RunVisitor& fn) override {
    for (const Run& run : runs_) {
      fn(run.model, run.source, run.tier,
         std::span<const uint64_t>(hashes_).subspan(run.begin, run.size));
    }
    runs_.clear();
  }

 private:
  struct Run {
    uint32_t model;
    uint32_t source;
    Tier tier;
    size_t begin, size;
  };
  std::vector<Run> runs_;
  std::vector<uint64_t> hashes_;
};

}  // namespace

StatusOr<std::unique_ptr<IndexCapture>> IndexInterface::BeginCapture() const {
  return std::unique_ptr<IndexCapture>(std::make_unique<CopiedCapture>(*this));
}

}  // namespace kvindex::index
