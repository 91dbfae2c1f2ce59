#include "shared/index/internal/entry_digest.h"

#include <bit>
#include <cstring>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvindex::index::internal {

static_assert(std::endian::native == std::endian::little, "digest keys are little-endian");

std::string DigestPrefix(std::string_view model, const SourceKey& source) {
  std::string prefix;
  prefix.reserve(model.size() + source.worker.size() + 6);
  prefix.append(model);
  prefix.push_back('\0');
  prefix.append(source.worker);
  prefix.push_back('\0');
  char rank[4];
  std::memcpy(rank, &source.dp_rank, 4);
  prefix.append(rank, 4);
  return prefix;
}

uint64_t EntryDigestSum(std::string_view prefix, Tier tier, const uint64_t* hashes, size_t n) {
  constexpr size_t kStack = 256;
  const size_t len = prefix.size() + 9;
  char stack[kStack];
  std::vector<char> heap;
  char* buf = stack;
  if (len > kStack) {
    heap.resize(len);
    buf = heap.data();
  }
  std::memcpy(buf, prefix.data(), prefix.size());
  buf[prefix.size()] = static_cast<char>(tier);
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(buf + prefix.size() + 1, &hashes[i], 8);
    sum += XXH3_64bits_withSeed(buf, len, 0);
  }
  return sum;
}

}  // namespace kvindex::index::internal
