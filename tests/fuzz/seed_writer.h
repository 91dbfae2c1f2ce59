// Seed corpora of the fuzz targets, built by the code they exercise: a
// target that defines `void WriteSeeds(const SeedWriter&)` and includes
// this header writes its seeds into $KVINDEX_FUZZ_WRITE_SEEDS (when set) at
// start and exits, e.g.
//   KVINDEX_FUZZ_WRITE_SEEDS=tests/fuzz/corpus/checkpoint_reader_fuzz \
//     build-fuzz/fuzz/checkpoint_reader_fuzz
// (the committed corpora in tests/fuzz/corpus/<target>/ were made so).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tests/fuzz/fuzz_check.h"

namespace kvindex::fuzz {

struct SeedWriter {
  std::string dir;
  void operator()(std::string_view name, std::string_view bytes) const {
    const std::string path = dir + "/" + std::string(name);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    FUZZ_CHECK(f != nullptr, "seed file opens");
    FUZZ_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size(), "seed written");
    std::fclose(f);
  }
};

void WriteSeeds(const SeedWriter& write);

}  // namespace kvindex::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("KVINDEX_FUZZ_WRITE_SEEDS"); dir != nullptr && *dir != 0) {
    kvindex::fuzz::WriteSeeds(kvindex::fuzz::SeedWriter{dir});
    std::exit(0);
  }
  return 0;
}
