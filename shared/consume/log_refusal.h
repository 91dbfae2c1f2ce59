// LogRefusal: why a log message was dropped whole before any of its events
// was applied (AgentTable::Admit; docs/security.md, "The log"). Counted in
// kvindex_router_log_messages_refused_total{reason}.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvindex::consume {

enum class LogRefusal : uint8_t {
  kBadSubject = 0,        // a subject no kvindex writer produces
  kSubjectMismatch = 1,   // the header's node is not the subject's (or no header)
  kForeignEvent = 2,      // an event names another node as its agent
  kForeignSource = 3,     // an event concerns a source another node owns
  kKindNotAllowed = 4,    // an event kind the subject may not carry
  kIncarnationAhead = 5,  // a new incarnation too far ahead of the log's clock
  kTooManySources = 6,    // the node would own more than max_sources_per_node
  kTooManyNodes = 7,      // a node not live yet while max_nodes are (AgentTableOptions)
  // Stored events of sources the node may not add to a model more than 3/4
  // full (SourceQuota): only those sources' events are dropped.
  kModelSourcesFull = 8,
  kTooManySubjects = 9,  // a new subject past max_subjects_per_node (AgentTableOptions)
};
inline constexpr int kNumLogRefusals = 10;

// "bad_subject", "subject_mismatch", "foreign_event", "foreign_source",
// "kind_not_allowed", "incarnation_ahead", "too_many_sources",
// "too_many_nodes", "model_sources_full", "too_many_subjects".
std::string_view LogRefusalLabel(LogRefusal refusal);

}  // namespace kvindex::consume
