#!/usr/bin/env bash
# The README test command: installs dependencies, builds, and passes every
# check CI runs. Stages (all by default):
#   format   clang-format check of every C++ file
#   release  gcc Release build + the whole ctest suite (unit + integration +
#            the reliability suite's CI profile)
#   asan     clang AddressSanitizer + UndefinedBehaviorSanitizer build
#            (build-asan, cmake/ci-asan.cmake: libFuzzer coverage and
#            -Wthread-safety on every target) + ctest; the fuzz targets are
#            built in the same tree, so the libraries are compiled once
#   tsan     clang build with -Wthread-safety -Werror (the locking rules) and
#            ThreadSanitizer (build-tsan, cmake/ci-tsan.cmake); runs the tests
#            labelled `concurrent`
#   fuzz     every libFuzzer target of build-asan (built there if the asan
#            stage did not run), one fixed budget shared by all targets:
#            KVINDEX_FUZZ_TOTAL_SECONDS (default 200) / number of targets, at
#            least 10 s each, two targets at a time (one per core);
#            KVINDEX_FUZZ_SECONDS sets a per-target time instead
# Time from a cold compiler cache on 2 cores, install-deps included: ~50 min
# estimated (72 min measured before build-asan moved to clang and absorbed
# the fuzz tree); docs/benchmarks.md, "CI time", has the per-stage figures
# and how to measure them. Three build trees: build (gcc), build-asan,
# build-tsan (clang).
# Usage: scripts/test.sh [stage ...]
set -euo pipefail
cd "$(dirname "$0")/.."

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(format release asan tsan fuzz)
jobs="${KVINDEX_JOBS:-2}"
# ccache: paths relative to the checkout, so a fresh clone elsewhere on the
# same machine reuses what an earlier build compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"

bash scripts/install-deps.sh

run_format() {
  echo "== clang-format check"
  local files
  files=$(git ls-files '*.cc' '*.h' 2>/dev/null || find shared services storage tests -name '*.cc' -o -name '*.h')
  # shellcheck disable=SC2086
  clang-format --dry-run --Werror $files
  echo "clang-format: $(echo "$files" | wc -w) files clean"
}

run_build_and_tests() {
  local dir="$1"; shift
  echo "== build $dir ($*)"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  echo "== ctest $dir"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 600)
}

# One clang build checks the annotated locking rules (-Wthread-safety, see
# cmake/KvindexTargets.cmake) and runs the multi-threaded tests under TSan.
# Only the tests labelled `concurrent` and what they link are built.
run_tsan() {
  local dir=build-tsan
  echo "== build $dir (clang, -Wthread-safety, ThreadSanitizer)"
  cmake -C cmake/ci-tsan.cmake -S . -B "$dir" -G Ninja >/dev/null
  local targets
  mapfile -t targets < <(cd "$dir" && ctest -N -L concurrent | sed -n 's/^ *Test *#[0-9]*: *//p')
  if [ ${#targets[@]} -eq 0 ]; then
    echo "tsan: no tests labelled concurrent" >&2
    return 1
  fi
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
  echo "== ctest $dir -L concurrent (${targets[*]})"
  local options="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"
  (cd "$dir" && TSAN_OPTIONS="$options" ctest --output-on-failure -j "$jobs" -L concurrent --timeout 900)
}

for stage in "${stages[@]}"; do
  case "$stage" in
    format) run_format ;;
    release) run_build_and_tests build -DCMAKE_BUILD_TYPE=Release ;;
    asan)
      # One clang tree for the sanitizer tests and the fuzz targets (the
      # fuzz stage runs them from here): the libraries are compiled once.
      # A build-asan from before (gcc) is configured afresh: CMake drops the
      # other -C settings when the compiler changes under an existing cache.
      if [ -f build-asan/CMakeCache.txt ] &&
        ! grep -q '^CMAKE_CXX_COMPILER:.*clang++$' build-asan/CMakeCache.txt; then
        rm -rf build-asan/CMakeCache.txt build-asan/CMakeFiles
      fi
      ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        run_build_and_tests build-asan -C cmake/ci-asan.cmake ;;
    tsan) run_tsan ;;
    fuzz)
      # A fixed total budget: new targets share it instead of lengthening CI.
      KVINDEX_FUZZ_BUILD="$PWD/build-asan" KVINDEX_FUZZ_JOBS="$jobs" \
        KVINDEX_FUZZ_TOTAL_SECONDS="${KVINDEX_FUZZ_TOTAL_SECONDS:-200}" \
        bash tests/fuzz/run_fuzzers.sh ${KVINDEX_FUZZ_SECONDS:+"$KVINDEX_FUZZ_SECONDS"} ;;
    *) echo "scripts/test.sh: unknown stage '$stage' (format, release, asan, tsan, fuzz)" >&2; exit 2 ;;
  esac
done
echo "scripts/test.sh: all stages passed (${stages[*]})"
