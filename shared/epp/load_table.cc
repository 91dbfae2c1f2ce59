#include "shared/epp/load_table.h"

namespace kvindex::epp {

void LoadTable::Update(const SourceKey& source, const codec::EngineLoad& load,
                       Clock::time_point now) {
  {
    WriterLock lock(&mu_);
    entries_.insert_or_assign(source, Entry{load, now});
  }
  updates_.fetch_add(1, std::memory_order_relaxed);
}

std::optional<codec::EngineLoad> LoadTable::Fresh(const SourceKey& source,
                                                  Clock::time_point now) const {
  ReaderLock lock(&mu_);
  auto it = entries_.find(source);
  if (it == entries_.end()) return std::nullopt;
  if (now - it->second.received > max_age_) {
    stale_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  return it->second.load;
}

size_t LoadTable::size() const {
  ReaderLock lock(&mu_);
  return entries_.size();
}

}  // namespace kvindex::epp
