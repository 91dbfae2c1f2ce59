#include "shared/compat/sglang_indexer.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "shared/base/strings.h"
#include "shared/query/compat_hashes.h"

namespace kvindex::compat {
namespace {

using Outcome = query::CompatApi::Outcome;
using query::compat::FromSglangI64;

SglangStatus Error(SglangCode code, Outcome outcome, std::string message) {
  return SglangStatus{code, outcome, std::move(message)};
}

// SGLang's validate_hashes (+ the ceiling of validate_hashes_bounded).
SglangStatus CheckHashes(int count, bool bounded) {
  if (count == 0) {
    return Error(SglangCode::kInvalidArgument, Outcome::kMissingField, "hashes must not be empty");
  }
  if (bounded && static_cast<size_t>(count) > kSglangMaxHashes) {
    return Error(
        SglangCode::kResourceExhausted, Outcome::kTooManyHashes,
        strings::Cat("request contains ", count, " hashes; maximum is ", kSglangMaxHashes));
  }
  return SglangStatus{};
}

// A lookup error: an unknown model has nothing cached (answered empty, as
// SGLang's indexer answers for hashes it never saw, and counted); anything
// else is UNAVAILABLE.
SglangStatus LookupFailure(const Status& status) {
  if (status.code() == absl::StatusCode::kNotFound) {
    return Error(SglangCode::kOk, Outcome::kUnknownModel, std::string(status.message()));
  }
  return Error(SglangCode::kUnavailable, Outcome::kUnavailable, std::string(status.message()));
}

// The SGLang tier of the fastest tier a one-block match found the block in;
// TIER_UNKNOWN for the external tier, which SGLang does not have.
pb::TierType FastestTier(const index::WorkerMatch& m) {
  if (m.device != 0) return pb::TIER_HBM;
  if (m.host != 0) return pb::TIER_DRAM;
  if (m.disk != 0) return pb::TIER_SSD;
  return pb::TIER_UNKNOWN;
}

}  // namespace

SglangIndexer::SglangIndexer(const query::ApiContext* context, SglangOptions options)
    : context_(context), options_(std::move(options)) {}

std::string SglangIndexer::WorkerId(const SourceKey& source) {
  if (source.dp_rank == 0) return source.worker;
  return strings::Cat(source.worker, ":dp", source.dp_rank);
}

bool SglangIndexer::PickModel(std::string* model, SglangStatus* status) const {
  if (!options_.model.empty()) {
    *model = options_.model;
    return true;
  }
  std::vector<std::string> models = context_->index->Models();
  for (const auto& [name, block_size] : context_->configured_models) models.push_back(name);
  std::sort(models.begin(), models.end());
  models.erase(std::unique(models.begin(), models.end()), models.end());
  if (models.size() <= 1) {
    *model = models.empty() ? std::string() : models.front();
    return true;
  }
  std::string names;
  for (const std::string& name : models) names += (names.empty() ? "" : ", ") + name;
  *status = Error(SglangCode::kFailedPrecondition, Outcome::kModelAmbiguous,
                  strings::Cat("the router indexes several models (", names,
                               ") and SGLang's requests name none: start it with "
                               "--sglang-model MODEL"));
  return false;
}

SglangStatus SglangIndexer::MatchPrefix(const pb::MatchExternalKvPrefixRequest& request,
                                        pb::MatchExternalKvPrefixResponse* response) const {
  response->Clear();
  if (SglangStatus s = CheckHashes(request.hashes_size(), /*bounded=*/false); !s.ok()) return s;
  size_t n = static_cast<size_t>(request.hashes_size());
  if (request.max_blocks() != 0 && request.max_blocks() < n) n = request.max_blocks();
  response->set_blocks_read(static_cast<uint32_t>(n));
  std::string model;
  SglangStatus status;
  if (!PickModel(&model, &status)) return status;
  if (model.empty()) return status;  // nothing indexed yet: no match

  thread_local query::MatchRequest parsed;
  parsed.Clear();
  parsed.model = model;
  parsed.has_seq_hashes = true;
  parsed.seq_hashes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    parsed.seq_hashes[i] = FromSglangI64(request.hashes(static_cast<int>(i)));
  }
  if (options_.aliases != nullptr) options_.aliases->Translate(model, parsed.seq_hashes);
  StatusOr<index::MatchResult> result = query::Lookup(*context_, parsed, consume::Endpoint::kQuery);
  if (!result.ok()) return LookupFailure(result.status());

  // One row per router-facing address (DP ranks serving one address are one
  // worker to sgl-router): the best of them, /v1/match's `longest`.
  struct Row {
    std::string address;
    std::string worker_id;
    uint32_t blocks = 0;
  };
  thread_local std::vector<Row> rows;
  rows.clear();
  for (const index::WorkerMatch& m : result->workers) {
    std::string address = options_.address(m.source);
    if (address.empty()) continue;  // unroutable: SGLang leaves such workers out
    auto it =
        std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.address == address; });
    if (it == rows.end()) {
      rows.push_back(Row{std::move(address), WorkerId(m.source), m.longest});
    } else if (m.longest > it->blocks) {
      it->worker_id = WorkerId(m.source);
      it->blocks = m.longest;
    }
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.blocks != b.blocks) return a.blocks > b.blocks;
    if (a.worker_id != b.worker_id) return a.worker_id < b.worker_id;
    return a.address < b.address;
  });
  for (const Row& row : rows) {
    pb::ExternalKvPrefixMatch* match = response->add_matches();
    match->set_worker_address(row.address);
    match->set_matched_prefix_blocks(row.blocks);
    match->set_worker_id(row.worker_id);
  }
  response->set_best_prefix_blocks(rows.empty() ? 0 : rows.front().blocks);
  return SglangStatus{};
}

SglangStatus SglangIndexer::Match(const pb::MatchExternalKvRequest& request,
                                  pb::MatchExternalKvResponse* response) {
  response->Clear();
  if (SglangStatus s = CheckHashes(request.hashes_size(), /*bounded=*/true); !s.ok()) return s;
  std::string model;
  SglangStatus status;
  if (!PickModel(&model, &status)) return status;
  if (model.empty()) return status;

  // Placement of each block on its own: one lookup of the one-block
  // sequence per distinct hash (the index finds a sequence hash wherever
  // it sits in a chain); each block in the fastest tier that holds it.
  struct Node {
    SourceKey source;
    std::array<std::vector<int64_t>, 3> by_tier;  // HBM, DRAM, SSD
  };
  std::vector<Node> nodes;
  absl::flat_hash_map<SourceKey, size_t> node_of;
  absl::flat_hash_set<int64_t> seen;
  std::vector<uint64_t> matched;
  query::MatchRequest parsed;
  parsed.model = model;
  parsed.has_seq_hashes = true;
  parsed.seq_hashes.resize(1);
  for (const int64_t hash : request.hashes()) {
    if (!seen.insert(hash).second) continue;
    parsed.seq_hashes[0] = FromSglangI64(hash);
    if (options_.aliases != nullptr) options_.aliases->Translate(model, parsed.seq_hashes);
    StatusOr<index::MatchResult> result =
        query::Lookup(*context_, parsed, consume::Endpoint::kQuery);
    if (!result.ok()) {
      response->Clear();
      return LookupFailure(result.status());
    }
    bool held = false;
    for (const index::WorkerMatch& m : result->workers) {
      const pb::TierType tier = FastestTier(m);
      if (tier == pb::TIER_UNKNOWN) continue;  // external only: no SGLang tier
      auto [it, inserted] = node_of.try_emplace(m.source, nodes.size());
      if (inserted) nodes.push_back(Node{m.source, {}});
      nodes[it->second].by_tier[tier - 1].push_back(hash);
      held = true;
    }
    if (held && request.count_as_hit()) matched.push_back(FromSglangI64(hash));
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const Node& a, const Node& b) { return a.source < b.source; });
  for (const Node& node : nodes) {
    pb::ExternalKvNodeMatch* out = response->add_matches();
    out->set_worker_id(WorkerId(node.source));
    out->set_address(options_.address(node.source));
    for (size_t t = 0; t < node.by_tier.size(); ++t) {
      if (node.by_tier[t].empty()) continue;
      pb::TierHashes* tier = out->add_hashes_by_tier();
      tier->set_tier(static_cast<pb::TierType>(t + 1));
      tier->mutable_hashes()->Add(node.by_tier[t].begin(), node.by_tier[t].end());
    }
  }
  if (!matched.empty()) {
    MutexLock lock(&hits_mu_);
    for (const uint64_t hash : matched) {
      auto it = hits_.find(hash);
      if (it != hits_.end()) {
        ++it->second;
      } else if (hits_.size() < kSglangMaxHitCounters) {
        hits_.emplace(hash, 1);
      }
    }
  }
  return status;
}

SglangStatus SglangIndexer::HitCounts(const pb::GetExternalKvHitCountsRequest& request,
                                      pb::GetExternalKvHitCountsResponse* response) const {
  response->Clear();
  if (SglangStatus s = CheckHashes(request.hashes_size(), /*bounded=*/true); !s.ok()) return s;
  absl::flat_hash_set<int64_t> seen;
  MutexLock lock(&hits_mu_);
  for (const int64_t hash : request.hashes()) {
    if (!seen.insert(hash).second) continue;
    auto it = hits_.find(FromSglangI64(hash));
    if (it == hits_.end()) continue;  // never counted: no entry
    pb::HitCountEntry* entry = response->add_entries();
    entry->set_hash(hash);
    entry->set_hit_count_total(it->second);
  }
  return SglangStatus{};
}

SglangStatus SglangIndexer::ApplyBatch(const pb::ApplyExternalKvBatchRequest& request) const {
  if (options_.apply_batch) return options_.apply_batch(request);
  return Error(
      SglangCode::kUnimplemented, Outcome::kUnimplemented,
      strings::Cat("kvindex does not take ApplyExternalKvBatch (worker '", request.worker_id(),
                   "'): have kvindex follow the engine's KV events itself, with "
                   "kvindex-router --embedded --source 'worker=W,engine=sglang,model=M,"
                   "block_size=B,pub=tcp://HOST:PORT' or kvindex-agent --source ..., or an "
                   "embedded router started with --sglang-ingest (docs/compat.md)"));
}

}  // namespace kvindex::compat
