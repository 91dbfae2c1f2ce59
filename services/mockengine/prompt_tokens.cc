#include "services/mockengine/prompt_tokens.h"

namespace kvindex::mockengine {
namespace {

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<uint32_t> PromptTokens(const trace::TraceRequest& request) {
  std::vector<uint32_t> tokens;
  tokens.reserve(request.hash_ids.size() * kTokensPerHashId);
  for (uint64_t id : request.hash_ids) {
    for (uint32_t j = 0; j < kTokensPerHashId; ++j) {
      tokens.push_back(static_cast<uint32_t>(Mix64(id * kTokensPerHashId + j) % 128000) + 1);
    }
  }
  if (request.input_length > 0 && request.input_length < tokens.size()) {
    tokens.resize(request.input_length);
  }
  return tokens;
}

}  // namespace kvindex::mockengine
