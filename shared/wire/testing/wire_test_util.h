// Test helpers shared by the wire, normalize and ctl tests: golden-vector
// loading and the facts the vectors encode (data/README.md, "wire-vectors").
// Header-only; test code only.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace kvindex::wire::testing {

inline constexpr uint64_t kGoldenHash0 = 0xDAB89BAA7B5857C0ull;
inline constexpr uint64_t kGoldenHash1 = 0x0123456789ABCDEFull;
inline constexpr double kGoldenTs = 1757500000.25;
inline constexpr uint32_t kGoldenBlockSize = 16;

// Tokens 100..131 (two 16-token blocks).
inline std::vector<uint32_t> GoldenTokens() {
  std::vector<uint32_t> tokens;
  for (uint32_t t = 100; t < 132; ++t) tokens.push_back(t);
  return tokens;
}

// Directory of the golden vectors: $KVINDEX_SOURCE_DIR/data/wire-vectors (set
// by ctest), else data/wire-vectors below the working directory.
inline std::string GoldenDir() {
  const char* source = std::getenv("KVINDEX_SOURCE_DIR");
  if (source != nullptr) return std::string(source) + "/data/wire-vectors";
  return "data/wire-vectors";
}

inline std::vector<uint8_t> ReadGolden(const std::string& name) {
  std::ifstream in(GoldenDir() + "/" + name + ".msgpack", std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace kvindex::wire::testing
