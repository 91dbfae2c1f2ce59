#include "shared/consume/log_refusal.h"

namespace kvindex::consume {

std::string_view LogRefusalLabel(LogRefusal refusal) {
  switch (refusal) {
    case LogRefusal::kBadSubject:
      return "bad_subject";
    case LogRefusal::kSubjectMismatch:
      return "subject_mismatch";
    case LogRefusal::kForeignEvent:
      return "foreign_event";
    case LogRefusal::kForeignSource:
      return "foreign_source";
    case LogRefusal::kKindNotAllowed:
      return "kind_not_allowed";
    case LogRefusal::kIncarnationAhead:
      return "incarnation_ahead";
    case LogRefusal::kTooManySources:
      return "too_many_sources";
    case LogRefusal::kTooManyNodes:
      return "too_many_nodes";
    case LogRefusal::kModelSourcesFull:
      return "model_sources_full";
    case LogRefusal::kTooManySubjects:
      return "too_many_subjects";
  }
  return "unknown";
}

}  // namespace kvindex::consume
