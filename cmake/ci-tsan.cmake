# Initial cache of CI's ThreadSanitizer tree, build-tsan (scripts/test.sh tsan):
#   cmake -C cmake/ci-tsan.cmake -S . -B build-tsan -G Ninja
# clang (-Wthread-safety, cmake/KvindexTargets.cmake) and TSan.
set(CMAKE_C_COMPILER clang CACHE STRING "" FORCE)
set(CMAKE_CXX_COMPILER clang++ CACHE STRING "" FORCE)
set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "" FORCE)
set(KVINDEX_TSAN ON CACHE BOOL "" FORCE)
set(KVINDEX_SANITIZE OFF CACHE BOOL "" FORCE)
set(KVINDEX_FUZZ OFF CACHE BOOL "" FORCE)
