// IndexInterface: the contract every tiered index implementation fulfils.
//
// KvIndex (kv_index.h) is the production implementation; ReferenceIndex
// (reference_index.h) is a deliberately naive set-based oracle used by the
// differential tests. Both are driven through this interface, so a test can
// replay one event stream through either. Calls are virtual per event or per
// query, never per block.
//
//   KvIndex index;
//   index.Apply(event, /*log_position=*/1);
//   auto match = index.MatchTokens("llama", tokens, /*lora_name=*/"", /*cache_salt=*/"");
//
// Thread safety: Apply and RestoreEntry from ONE writer thread; the const
// methods from any thread (implementations document their own guarantees).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"
#include "shared/index/index_types.h"
#include "shared/model/placement_event.h"

namespace kvindex::index {

// What ApplyMessage did with one log message. Not [[nodiscard]]: most
// writers (restores, benchmarks, tests) only need the state it leaves.
struct ApplyResult {
  // False: the position was at or below applied_seq; the message was ignored.
  bool applied = false;
  // OK, or ResourceExhausted: a model ran out of index memory, so stored
  // blocks were left out or a source was cleared, or stored events were left
  // out past the source or model limit (fail closed: the index
  // undercounts, never overcounts). The message still counts as applied.
  Status status;
  // Of this message: blocks of stored events not indexed (always the tail
  // of their event), and sources cleared because a removal could not split.
  uint64_t blocks_not_indexed = 0;
  uint64_t sources_cleared = 0;
  // Stored events not indexed at all: their model holds its maximum of
  // sources, or the index its maximum of models (max_models).
  uint64_t events_over_source_limit = 0;
  uint64_t events_over_model_limit = 0;
};

// A consistent view of an index at one log position, read while its writer
// goes on applying (a checkpoint's capture, issue #26.8). BeginCapture takes
// it on the writer thread in a pause that does not grow with the entries
// (KvIndex: one pointer per node, the source names, the counts); ForEachRun
// then reads the entries as they were at that moment, from any one thread,
// while the writer applies further messages. The index must outlive it;
// destroying it ends the capture (read whole or not).
class IndexCapture {
 public:
  struct Model {
    std::string name;
    uint32_t block_size = 0;
    uint64_t blocks = 0;  // distinct blocks (a sizing hint for a restore)
    // The model's sources by id, as of BeginCapture (runs name them by id;
    // an id no run names may hold anything).
    std::vector<SourceKey> sources;
  };
  // One run of entries: `model` indexes models(), `source` that model's
  // sources (so a reader can keep what it derives from a source in a
  // vector, with no lookup by name per run); `hashes` is valid only during
  // the call (it points into the index).
  using RunVisitor =
      std::function<void(uint32_t model, uint32_t source, Tier, std::span<const uint64_t>)>;

  virtual ~IndexCapture() = default;
  // The index at BeginCapture: applied_seq, digest and entry counts.
  const IndexStats& stats() const { return stats_; }
  // Every model at BeginCapture, by name.
  const std::vector<Model>& models() const { return models_; }
  // Every entry at BeginCapture, once (a second call visits nothing).
  virtual void ForEachRun(const RunVisitor& fn) = 0;

 protected:
  IndexStats stats_;
  std::vector<Model> models_;
};

class IndexInterface {
 public:
  using EntryVisitor =
      std::function<void(std::string_view model, const SourceKey&, Tier, uint64_t seq_hash)>;
  // A run of entries of one (model, source, tier); `hashes` is valid only
  // during the call (it may point into the index).
  using RunVisitor = std::function<void(std::string_view model, const SourceKey&, Tier,
                                        std::span<const uint64_t> hashes)>;

  virtual ~IndexInterface() = default;

  // Applies the events of one log message, in order, all at log position
  // `log_position` (strictly increasing; a message at or below the current
  // applied_seq is ignored, `applied` false, so replay is idempotent; an
  // empty message only advances applied_seq). Heartbeats and agent_expired
  // only advance applied_seq (liveness is decided by consume::AgentTable,
  // which turns an expiry into kCleared events). kWorkerExpired removes every
  // dp_rank of source.worker in every model. kCleared with an empty model
  // clears the source in every model. An implementation with memory limits
  // applies what fits and reports the rest in `status` (ApplyResult).
  virtual ApplyResult ApplyMessage(std::span<const PlacementEvent> events,
                                   uint64_t log_position) = 0;

  // One event as its own message at `log_position`.
  ApplyResult Apply(const PlacementEvent& event, uint64_t log_position) {
    return ApplyMessage(std::span<const PlacementEvent>(&event, 1), log_position);
  }

  // Match by canonical sequence hashes. NotFound if the model is unknown.
  virtual StatusOr<MatchResult> MatchSequenceHashes(std::string_view model,
                                                    std::span<const uint64_t> seq_hashes,
                                                    const MatchOptions& options = {}) const = 0;

  // Match by tokens: uses the model's block size learned from stored events and
  // the lora/salt seed (semantics.md section 2). NotFound if the model is
  // unknown, FailedPrecondition if its block size is not known yet.
  StatusOr<MatchResult> MatchTokens(std::string_view model, std::span<const uint32_t> tokens,
                                    std::string_view lora_name, std::string_view cache_salt,
                                    const MatchOptions& options = {}) const;

  // Match by local hashes, chained from the root into sequence hashes first.
  StatusOr<MatchResult> MatchLocalHashes(std::string_view model,
                                         std::span<const uint64_t> local_hashes,
                                         const MatchOptions& options = {}) const;

  // Writer thread: `observer` (null: none; one at a time) is told of every
  // block that leaves the index from now on (DepartureObserver).
  virtual void set_departure_observer(DepartureObserver* observer) = 0;

  virtual std::optional<uint32_t> BlockSize(std::string_view model) const = 0;
  virtual std::vector<std::string> Models() const = 0;  // sorted
  virtual IndexStats Stats() const = 0;
  virtual std::vector<SourceInfo> Sources() const = 0;  // sorted by model, then source

  // Checkpoint seam: visit every entry (writer thread or quiescent) ...
  virtual void ForEachEntry(const EntryVisitor& fn) const = 0;
  // The same entries in the same order, as runs (a checkpoint's capture: one
  // call per run, not per entry). Default: ForEachEntry's entries grouped.
  virtual void ForEachRun(const RunVisitor& fn) const;
  // A consistent view to read while the writer goes on (IndexCapture), taken
  // on the writer thread. FailedPrecondition while another capture of this
  // index is open. Default: a copy of every entry (ForEachRun).
  virtual StatusOr<std::unique_ptr<IndexCapture>> BeginCapture() const;
  // ... and restore one (writer thread). Does not advance applied_seq.
  virtual void RestoreEntry(std::string_view model, const SourceKey& source, Tier tier,
                            uint64_t seq_hash, uint32_t block_size) = 0;
  // Restore the log position after RestoreEntry calls (writer thread).
  virtual void RestoreAppliedSeq(uint64_t log_position) = 0;
  // RestoreEntry for a run of hashes of one (model, source, tier) at once.
  virtual void RestoreRun(std::string_view model, const SourceKey& source, Tier tier,
                          std::span<const uint64_t> hashes, uint32_t block_size) {
    for (uint64_t hash : hashes) RestoreEntry(model, source, tier, hash, block_size);
  }
  // Capacity hint before a restore (writer thread): the model is about to
  // hold `blocks` distinct blocks, so its structures are sized once.
  virtual void ReserveBlocks(std::string_view /*model*/, uint64_t /*blocks*/) {}
  // Distinct blocks the model holds, whatever the holders (writer thread or
  // quiescent); 0 when the implementation does not know.
  virtual uint64_t DistinctBlocks(std::string_view /*model*/) const { return 0; }
  // How many sources hold at least one entry of `model` (writer thread or
  // quiescent), and when `out` is not null their keys, appended (the
  // consume layer's per-model source quota). Default: from Sources().
  virtual size_t ModelSources(std::string_view model, std::vector<SourceKey>* out) const;
};

// Sorts match rows: longest desc, then worker, then dp_rank (semantics.md section 5).
void SortWorkerMatches(std::vector<WorkerMatch>* rows);

// The digest terms (semantics.md section 6) of entries (model, source, tier,
// hash) for every hash: what these entries add to IndexStats::digest. Lets a
// checkpoint verify itself before it is loaded into an index.
uint64_t EntriesDigest(std::string_view model, const SourceKey& source, Tier tier,
                       std::span<const uint64_t> hashes);
// The same in two steps, for a reader of many runs of one source: the
// (model, source) part of the key once (EntriesDigestPrefix), then one
// XXH3 per hash.
std::string EntriesDigestPrefix(std::string_view model, const SourceKey& source);
uint64_t EntriesDigest(std::string_view prefix, Tier tier, std::span<const uint64_t> hashes);

}  // namespace kvindex::index
