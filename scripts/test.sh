#!/usr/bin/env bash
# The README test command: installs dependencies, builds, and passes every
# check CI runs. Stages (all by default):
#   format   clang-format check of every C++ file
#   release  Release build + the whole ctest suite (unit + integration)
#   asan     AddressSanitizer + UndefinedBehaviorSanitizer build + ctest
#   tsan     clang build with -Wthread-safety -Werror (the locking rules) and
#            ThreadSanitizer; runs the tests labelled `concurrent`
#   fuzz     libFuzzer targets (clang), bounded time each (KVINDEX_FUZZ_SECONDS, default 36: five targets in 3 min)
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
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKVINDEX_TSAN=ON >/dev/null
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
      ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        run_build_and_tests build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVINDEX_SANITIZE=ON ;;
    tsan) run_tsan ;;
    fuzz)
      if [ -x tests/fuzz/run_fuzzers.sh ] || [ -f tests/fuzz/run_fuzzers.sh ]; then
        bash tests/fuzz/run_fuzzers.sh "${KVINDEX_FUZZ_SECONDS:-36}"
      else
        echo "fuzz: no fuzz targets yet"
      fi ;;
    *) echo "scripts/test.sh: unknown stage '$stage' (format, release, asan, tsan, fuzz)" >&2; exit 2 ;;
  esac
done
echo "scripts/test.sh: all stages passed (${stages[*]})"
