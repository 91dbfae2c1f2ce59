// ResumeSaved: which of the agent's sources continue from the states saved
// before a restart (AgentPipeline::SetResumeStates) and which start afresh
// (and so publish a start-up clear).
//
// A source resumes when a state was saved under its spec
// (FormatSourceSpec) and its new session accepts it. All or none: when the
// restored index disagrees with what the resumed sources say they hold
// (`consistent` false), none resumes. Sessions that do not resume are reset.
//
// Thread safety: the controlling thread, before the source threads start.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "shared/ingest/agent_pipeline.h"
#include "shared/ingest/source_session.h"
#include "shared/ingest/source_spec.h"

namespace kvindex::ingest::internal {

struct ResumeSource {
  const SourceSpec* spec;
  const std::string* label;  // for log lines
};

// `session(i)`: source i's current session; `reset(i)`: gives source i a
// fresh one. `consistent` may be empty (no check). Returns, per source,
// whether it resumed.
std::vector<bool> ResumeSaved(
    std::vector<SavedSource> saved, const std::vector<ResumeSource>& sources,
    const std::function<SourceSession*(size_t)>& session, const std::function<void(size_t)>& reset,
    const std::function<bool(const std::vector<HeldBlocks>&)>& consistent);

}  // namespace kvindex::ingest::internal
