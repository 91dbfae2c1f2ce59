// FUZZ_CHECK(condition, what): the invariant check of the libFuzzer targets
// in this folder. On failure it prints the file, line and what was expected
// to stderr and aborts, which libFuzzer reports as a crash (the input is
// saved as an artifact).
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition, what)                                                               \
  do {                                                                                            \
    if (!(condition)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant violated: %s (%s)\n", __FILE__, __LINE__, what, \
                   #condition);                                                                   \
      std::abort();                                                                               \
    }                                                                                             \
  } while (0)
