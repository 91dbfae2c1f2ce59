#!/usr/bin/env bash
# The README test command: installs dependencies, builds, and passes every
# check CI runs. Stages (all by default):
#   format   clang-format check of every C++ file
#   release  Release build + the whole ctest suite (unit + integration)
#   asan     AddressSanitizer + UndefinedBehaviorSanitizer build + ctest
#   fuzz     libFuzzer targets (clang), bounded time each (KVINDEX_FUZZ_SECONDS, default 60)
# Usage: scripts/test.sh [stage ...]
set -euo pipefail
cd "$(dirname "$0")/.."

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(format release asan fuzz)
jobs="${KVINDEX_JOBS:-2}"

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

for stage in "${stages[@]}"; do
  case "$stage" in
    format) run_format ;;
    release) run_build_and_tests build -DCMAKE_BUILD_TYPE=Release ;;
    asan)
      ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        run_build_and_tests build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVINDEX_SANITIZE=ON ;;
    fuzz)
      if [ -x tests/fuzz/run_fuzzers.sh ] || [ -f tests/fuzz/run_fuzzers.sh ]; then
        bash tests/fuzz/run_fuzzers.sh "${KVINDEX_FUZZ_SECONDS:-60}"
      else
        echo "fuzz: no fuzz targets yet"
      fi ;;
    *) echo "scripts/test.sh: unknown stage '$stage' (format, release, asan, fuzz)" >&2; exit 2 ;;
  esac
done
echo "scripts/test.sh: all stages passed (${stages[*]})"
