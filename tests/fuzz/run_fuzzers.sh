#!/usr/bin/env bash
# Builds every libFuzzer target with clang (ASan + UBSan) in CI's sanitizer
# tree, build-asan (cmake/ci-asan.cmake: the asan stage of scripts/test.sh
# builds the same tree, so its libraries serve both), and runs each binary
# found in build-asan/fuzz/ for N seconds (default 60).
#
#   tests/fuzz/run_fuzzers.sh [seconds]
#
# A new target needs only its kvindex_fuzzer(...) declaration in
# tests/fuzz/CMakeLists.txt: every executable the build puts in <build>/fuzz/
# is built and run, and everything it links carries coverage (KVINDEX_FUZZ).
#
# Seeds: the golden wire vectors (data/wire-vectors, their one copy) for
# every target, <build>/fuzz-seeds/<fuzzer>/ (generated from them by the
# build, see CMakeLists.txt) and tests/fuzz/seeds/<fuzzer>/ or
# tests/fuzz/corpus/<fuzzer>/ when a target has small committed seeds. The growing corpus lives in
# <build>/fuzz-corpus/<fuzzer>/ and is reused by later runs. A dictionary
# tests/fuzz/<fuzzer>.dict is used when present. Crashes land in
# <build>/fuzz-artifacts/; the script exits non-zero when any fuzzer
# finds one. One summary line per fuzzer goes to <build>/fuzz-summary.txt
# (copy the figures into docs/fuzzing.md).
#
# Environment: KVINDEX_FUZZ_BUILD (build dir, default <repo>/build-asan),
# KVINDEX_FUZZ_TOTAL_SECONDS (when set and no [seconds] argument is given:
# one budget of fuzzing seconds shared by all targets, at least 10 s each;
# CI's fixed budget),
# KVINDEX_FUZZ_JOBS (parallel compile jobs, default 2), KVINDEX_FUZZ_PARALLEL
# (targets fuzzed at once, default KVINDEX_FUZZ_JOBS), KVINDEX_FUZZ_BUILD_TESTS
# (default ON, see below),
# KVINDEX_FUZZ_ARGS (extra libFuzzer flags, e.g. "-max_len=65536"),
# KVINDEX_FUZZ_ONLY (an extended regex: run only the targets it matches).
# Long profile: tests/fuzz/run_fuzzers.sh 1800 (30 minutes each).
set -euo pipefail

seconds="${1:-}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${KVINDEX_FUZZ_BUILD:-${root}/build-asan}"
jobs="${KVINDEX_FUZZ_JOBS:-2}"

# A tree configured before with another compiler is configured afresh
# (CMake drops the other -C settings when the compiler changes).
if [[ -f "${build}/CMakeCache.txt" ]] &&
  ! grep -q '^CMAKE_CXX_COMPILER:.*clang++$' "${build}/CMakeCache.txt"; then
  rm -rf "${build}/CMakeCache.txt" "${build}/CMakeFiles"
fi
# The unit tests are configured but not built here (the asan stage builds
# them in the same tree).
cmake -C "${root}/cmake/ci-asan.cmake" -S "${root}" -B "${build}" -G Ninja \
  -DKVINDEX_BUILD_TESTS="${KVINDEX_FUZZ_BUILD_TESTS:-ON}" >/dev/null

# Only the fuzz executables (whatever their names): every ninja output under fuzz/.
mapfile -t targets < <(ninja -C "${build}" -t targets all | sed -n 's|^\(fuzz/[^:]*\): .*|\1|p')
if [[ ${#targets[@]} -eq 0 ]]; then
  echo "run_fuzzers: no fuzz targets in ${build}" >&2
  exit 1
fi
ninja -C "${build}" -j "${jobs}" "${targets[@]}"

if [[ -z "${seconds}" ]]; then
  if [[ -n "${KVINDEX_FUZZ_TOTAL_SECONDS:-}" ]]; then
    seconds=$((KVINDEX_FUZZ_TOTAL_SECONDS / ${#targets[@]}))
    ((seconds >= 10)) || seconds=10
    echo "run_fuzzers: ${#targets[@]} targets share ${KVINDEX_FUZZ_TOTAL_SECONDS}s: ${seconds}s each"
  else
    seconds=60
  fi
fi

mkdir -p "${build}/fuzz-corpus" "${build}/fuzz-artifacts"
summary="${build}/fuzz-summary.txt"
: >"${summary}"
# One target per core at a time (KVINDEX_FUZZ_PARALLEL, default the compile
# jobs): each still gets a whole core for its seconds, the stage takes
# ceil(targets / parallel) x seconds of wall time.
parallel="${KVINDEX_FUZZ_PARALLEL:-${jobs}}"

run_one() {
  local binary="$1" name corpus log result execs rate cov units line
  name="$(basename "${binary}")"
  corpus="${build}/fuzz-corpus/${name}"
  mkdir -p "${corpus}"
  local args=(-max_total_time="${seconds}" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048
              -artifact_prefix="${build}/fuzz-artifacts/${name}-")
  [[ -f "${root}/tests/fuzz/${name}.dict" ]] && args+=(-dict="${root}/tests/fuzz/${name}.dict")
  # shellcheck disable=SC2206
  args+=(${KVINDEX_FUZZ_ARGS:-})
  local dirs=("${corpus}")
  [[ -d "${build}/fuzz-seeds/${name}" ]] && dirs+=("${build}/fuzz-seeds/${name}")
  [[ -d "${root}/tests/fuzz/seeds/${name}" ]] && dirs+=("${root}/tests/fuzz/seeds/${name}")
  [[ -d "${root}/tests/fuzz/corpus/${name}" ]] && dirs+=("${root}/tests/fuzz/corpus/${name}")
  # The golden engine payloads seed every target (read-only: libFuzzer adds
  # new inputs to the first directory only).
  [[ -d "${root}/data/wire-vectors" ]] && dirs+=("${root}/data/wire-vectors")
  log="${build}/fuzz-${name}.log"
  echo "== ${name}: ${seconds}s (log ${log})"
  if "${binary}" "${args[@]}" "${dirs[@]}" >"${log}" 2>&1; then
    result="ok"
  else
    result="FAILED"
  fi
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "${log}" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "${log}" | tail -1)"
  cov="$(grep -o 'cov: [0-9]*' "${log}" | tail -1 | cut -d' ' -f2)"
  units="$(find "${corpus}" -type f | wc -l)"
  line="${name}: ${result}, ${seconds}s, ${execs:-?} execs (${rate:-?}/s), cov ${cov:-?}, corpus ${units} files"
  echo "${line}" | tee -a "${summary}"
  [[ "${result}" == "ok" ]] || tail -40 "${log}" >&2
  [[ "${result}" == "ok" ]]
}

status=0
running=0
for binary in "${build}"/fuzz/*; do
  [[ -x "${binary}" && -f "${binary}" ]] || continue
  [[ -z "${KVINDEX_FUZZ_ONLY:-}" || "$(basename "${binary}")" =~ ${KVINDEX_FUZZ_ONLY} ]] || continue
  if ((running >= parallel)); then
    wait -n || status=1
    running=$((running - 1))
  fi
  run_one "${binary}" &
  running=$((running + 1))
done
while ((running > 0)); do
  wait -n || status=1
  running=$((running - 1))
done
exit "${status}"
