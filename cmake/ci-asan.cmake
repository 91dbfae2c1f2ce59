# Initial cache of CI's sanitizer tree, build-asan (scripts/test.sh asan and
# fuzz, tests/fuzz/run_fuzzers.sh):
#   cmake -C cmake/ci-asan.cmake -S . -B build-asan -G Ninja
# One clang tree serves both stages, so the libraries are compiled once:
# AddressSanitizer + UndefinedBehaviorSanitizer everywhere, libFuzzer's
# coverage instrumentation everywhere (KVINDEX_FUZZ: whatever a fuzz target
# links is covered; the fuzz targets in <build>/fuzz/ link libFuzzer, the
# tests do not), clang's -Wthread-safety over every target
# (cmake/KvindexTargets.cmake). clang compiles these sanitizer TUs in about
# half gcc's CPU time (docs/benchmarks.md, "CI time"). FORCE: an older
# build-asan (gcc) is switched over instead of silently kept.
set(CMAKE_C_COMPILER clang CACHE STRING "" FORCE)
set(CMAKE_CXX_COMPILER clang++ CACHE STRING "" FORCE)
set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "" FORCE)
set(KVINDEX_SANITIZE ON CACHE BOOL "" FORCE)
set(KVINDEX_FUZZ ON CACHE BOOL "" FORCE)
set(KVINDEX_TSAN OFF CACHE BOOL "" FORCE)
# The benchmark harness (services/bench: kvindex-bench, its workloads and
# their smoke tests) is built and its smoke tests run in the release tree
# only: what they drive (index, router, checkpoints, HTTP, EPP) has its own
# tests here, under ASan; the harness itself ships nowhere.
set(KVINDEX_SKIP_DIRS bench CACHE STRING "" FORCE)
