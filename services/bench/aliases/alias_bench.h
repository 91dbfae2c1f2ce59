// `kvindex-bench aliases`: what a clear costs the SGLang alias map
// (shared/compat/sglang_alias_map.h), next to the sweep it replaced, in one
// run.
//
// A model holds --aliases aliased blocks, stored in chains of --chain blocks
// spread over --sources sources. Each of --clears clears is one source's
// cache restart (about aliases / sources blocks leave the index). Measured
// per clear:
//   index_clear_ms           the index applying the clear, no observer
//   index_clear_observed_ms  the same clear in a twin index that reports its
//                            departures to the map (the copy of the hashes)
//   on_applied_ms            the map's OnApplied after it: the departed
//                            blocks' aliases looked up, held ones kept
//   sweep_baseline_ms        what the map did before departures were
//                            reported: every alias of the model checked
//                            against the index (a one-block lookup each)
// and checked: the map holds exactly the aliases of the blocks still held.
// Before the clears, save_state_ms: SaveState of the whole map (what it adds
// to a checkpoint's apply pause).
#pragma once

namespace kvindex::bench {

int RunAliasBench(int argc, char** argv);

}  // namespace kvindex::bench
