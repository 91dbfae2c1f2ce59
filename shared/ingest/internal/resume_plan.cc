#include "shared/ingest/internal/resume_plan.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "shared/log/log.h"

namespace kvindex::ingest::internal {

std::vector<bool> ResumeSaved(
    std::vector<SavedSource> saved, const std::vector<ResumeSource>& sources,
    const std::function<SourceSession*(size_t)>& session, const std::function<void(size_t)>& reset,
    const std::function<bool(const std::vector<HeldBlocks>&)>& consistent) {
  std::vector<bool> resumed(sources.size(), false);
  if (saved.empty()) return resumed;
  absl::flat_hash_map<std::string, std::string> by_key;
  for (SavedSource& s : saved) by_key[s.key] = std::move(s.state);
  std::map<std::tuple<std::string, SourceKey, int>, uint64_t> held;
  for (size_t i = 0; i < sources.size(); ++i) {
    const SourceSpec& spec = *sources[i].spec;
    auto it = by_key.find(FormatSourceSpec(spec));
    if (it == by_key.end()) continue;
    if (Status status = session(i)->Resume(it->second); !status.ok()) {
      log::Get("ingest")->warn("source {}: saved state unusable, starting afresh: {}",
                               *sources[i].label, status.ToString());
      reset(i);
      continue;
    }
    resumed[i] = true;
    for (const auto& [rank_tier, blocks] : session(i)->processor().HeldCounts()) {
      held[{spec.model, SourceKey{spec.worker, static_cast<uint32_t>(rank_tier >> 2)},
            static_cast<int>(rank_tier & 3)}] += blocks;
    }
  }
  std::vector<HeldBlocks> summary;
  for (const auto& [key, blocks] : held) {
    summary.push_back(
        {std::get<0>(key), std::get<1>(key), static_cast<Tier>(std::get<2>(key)), blocks});
  }
  if (consistent && std::count(resumed.begin(), resumed.end(), true) > 0 && !consistent(summary)) {
    log::Get("ingest")->error(
        "saved source states disagree with the restored index: every source starts afresh");
    for (size_t i = 0; i < sources.size(); ++i) {
      if (resumed[i]) reset(i);
      resumed[i] = false;
    }
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    if (resumed[i]) {
      log::Get("ingest")->info("source {}: resumed at seq {} ({} blocks tracked)",
                               *sources[i].label, session(i)->last_seq(),
                               session(i)->tracked_blocks());
    }
  }
  return resumed;
}

}  // namespace kvindex::ingest::internal
