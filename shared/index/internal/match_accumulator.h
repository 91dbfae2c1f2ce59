// MatchAccumulator: per-query state of a prefix match over chain nodes
// (semantics.md section 5).
//
// A query walks nodes; each node covers `m` consecutive query blocks with one
// holder set, so the state changes only at node boundaries. Per holder group
// it keeps, as bitmaps over 64 source ids:
//   alive   - held every block so far (in any tier); longest is fixed when a bit drops
//   dev     - held every block so far on device; device_prefix is fixed when a bit drops
//   fastest - per tier, the alive sources whose fastest tier for the current
//             node is that tier; a source's block count in a tier grows by the
//             length of each stretch it spends there ("fastest tier wins")
// so a node costs a few word operations plus one step per source whose state
// changed, not one step per (block, source).
//
// Thread safety: one accumulator per thread (see ThreadLocal()).
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "shared/index/index_types.h"
#include "shared/index/internal/chain_node.h"

namespace kvindex::index::internal {

class MatchAccumulator {
 public:
  static MatchAccumulator& ThreadLocal() {
    thread_local MatchAccumulator acc;
    return acc;
  }

  void Reset() { states_.clear(); }

  // Query blocks from k up to the next Add (or Finish) are held as `node`
  // says; the first call has k == 0 and fixes the candidate sources. Returns
  // false once no source is alive.
  bool Add(const ChainNode& node, uint32_t k) {
    if (k == 0) return Start(node);
    bool any_alive = false;
    for (State& s : states_) {
      uint64_t t[kNumTiers] = {};
      for (uint32_t g = 0; g < node.num_groups; ++g) {
        const HolderGroup& hg = node.group(g);
        if (hg.group != s.group) continue;
        for (int x = 0; x < kNumTiers; ++x) t[x] = hg.tiers[x].load(std::memory_order_relaxed);
        break;
      }
      Advance(&s, t, k);
      any_alive |= s.alive != 0;
    }
    return any_alive;
  }

  // Source ids that hold block 0 (after the first Add): the rows to come.
  template <typename Fn>
  void ForEachCandidate(const Fn& fn) const {
    for (const State& s : states_) {
      for (uint64_t b = s.ever; b != 0; b &= b - 1) fn(s.group * kGroupBits + std::countr_zero(b));
    }
  }

  // Ends the walk after `end` matched blocks; visit(slot, source_id, longest)
  // for every source that holds block 0. `slot` (< 4096) names its counts for
  // Fill.
  template <typename Visit>
  void Finish(uint32_t end, const Visit& visit) {
    for (size_t i = 0; i < states_.size(); ++i) {
      State& s = states_[i];
      PerSource* ps = &per_source_[i * kGroupBits];
      for (uint64_t b = s.alive; b != 0; b &= b - 1) ps[std::countr_zero(b)].longest = end;
      for (uint64_t b = s.dev; b != 0; b &= b - 1) ps[std::countr_zero(b)].device_prefix = end;
      for (int t = 0; t < kNumTiers; ++t) {
        for (uint64_t b = s.fastest[t]; b != 0; b &= b - 1) {
          PerSource& p = ps[std::countr_zero(b)];
          p.count[t] += end - p.since[t];
        }
      }
      for (uint64_t b = s.ever; b != 0; b &= b - 1) {
        const int bit = std::countr_zero(b);
        visit(static_cast<uint32_t>(i * kGroupBits + bit), s.group * kGroupBits + bit,
              ps[bit].longest);
      }
    }
  }

  // Appends the row of a source Finish visited.
  void Emplace(uint32_t slot, const SourceKey& source, std::vector<WorkerMatch>* out) const {
    const PerSource& p = per_source_[slot];
    WorkerMatch& row = out->emplace_back();
    row.source = source;
    row.longest = p.longest;
    row.device = p.count[0];
    row.host = p.count[1];
    row.disk = p.count[2];
    row.external = p.count[3];
    row.device_prefix = p.device_prefix;
  }

 private:
  struct State {
    uint32_t group = 0;
    uint64_t alive = 0, dev = 0, ever = 0;
    uint64_t fastest[kNumTiers] = {};
  };
  struct PerSource {
    uint32_t longest = 0, device_prefix = 0;
    uint32_t since[kNumTiers] = {};
    uint32_t count[kNumTiers] = {};
  };

  bool Start(const ChainNode& node) {
    states_.clear();
    bool any_alive = false;
    for (uint32_t g = 0; g < node.num_groups; ++g) {
      const HolderGroup& hg = node.group(g);
      uint64_t t[kNumTiers];
      for (int x = 0; x < kNumTiers; ++x) t[x] = hg.tiers[x].load(std::memory_order_relaxed);
      const uint64_t any = t[0] | t[1] | t[2] | t[3];
      if (any == 0) continue;
      states_.push_back(State{});
      if (per_source_.size() < states_.size() * kGroupBits) {
        per_source_.resize(states_.size() * kGroupBits);
      }
      State& s = states_.back();
      s.group = hg.group;
      s.alive = s.ever = any;
      s.dev = t[0];
      PerSource* ps = &per_source_[(states_.size() - 1) * kGroupBits];
      for (uint64_t b = any; b != 0; b &= b - 1) ps[std::countr_zero(b)] = PerSource{};
      Fastest(t, any, s.fastest);
      any_alive = true;
    }
    return any_alive;
  }

  // Fastest tier wins: each alive source counts a block in exactly one tier.
  static void Fastest(const uint64_t* t, uint64_t alive, uint64_t* out) {
    out[0] = t[0] & alive;
    out[1] = t[1] & ~t[0] & alive;
    out[2] = t[2] & ~t[0] & ~t[1] & alive;
    out[3] = t[3] & ~t[0] & ~t[1] & ~t[2] & alive;
  }

  void Advance(State* s, const uint64_t* t, uint32_t k) {
    PerSource* ps = &per_source_[(s - states_.data()) * kGroupBits];
    const uint64_t any = t[0] | t[1] | t[2] | t[3];
    for (uint64_t b = s->alive & ~any; b != 0; b &= b - 1) ps[std::countr_zero(b)].longest = k;
    for (uint64_t b = s->dev & ~t[0]; b != 0; b &= b - 1) {
      ps[std::countr_zero(b)].device_prefix = k;
    }
    s->alive &= any;
    s->dev &= t[0];
    uint64_t next[kNumTiers];
    Fastest(t, s->alive, next);
    for (int x = 0; x < kNumTiers; ++x) {
      const uint64_t changed = s->fastest[x] ^ next[x];
      if (changed == 0) continue;
      for (uint64_t b = s->fastest[x] & changed; b != 0; b &= b - 1) {
        PerSource& p = ps[std::countr_zero(b)];
        p.count[x] += k - p.since[x];
      }
      for (uint64_t b = next[x] & changed; b != 0; b &= b - 1) ps[std::countr_zero(b)].since[x] = k;
      s->fastest[x] = next[x];
    }
  }

  std::vector<State> states_;
  std::vector<PerSource> per_source_;  // [state index * 64 + bit]
};

}  // namespace kvindex::index::internal
