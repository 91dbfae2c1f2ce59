#!/usr/bin/env bash
# Builds every libFuzzer target with clang (ASan + UBSan) into build-fuzz and
# runs each binary found in build-fuzz/fuzz/ for N seconds (default 60),
# within a total budget: each target gets at most
# KVINDEX_FUZZ_TOTAL_SECONDS / (number of targets) seconds (default total
# 180, so CI's fuzz stage stays about 3 minutes however many targets there
# are; 0 = no cap, for the long profile).
#
#   tests/fuzz/run_fuzzers.sh [seconds]
#   KVINDEX_FUZZ_TOTAL_SECONDS=0 tests/fuzz/run_fuzzers.sh 1800   # long profile
#
# Seeds: the golden wire vectors (data/wire-vectors, their one copy) for
# every target, <build>/fuzz-seeds/<fuzzer>/ (generated from them by the
# build, see CMakeLists.txt) and tests/fuzz/seeds/<fuzzer>/ or
# tests/fuzz/corpus/<fuzzer>/ when a target has small committed seeds. The growing corpus lives in
# build-fuzz/fuzz-corpus/<fuzzer>/ and is reused by later runs. A dictionary
# tests/fuzz/<fuzzer>.dict is used when present. Crashes land in
# build-fuzz/fuzz-artifacts/; the script exits non-zero when any fuzzer
# finds one. One summary line per fuzzer goes to build-fuzz/fuzz-summary.txt
# (copy the figures into docs/fuzzing.md).
#
# Environment: KVINDEX_FUZZ_BUILD (build dir, default <repo>/build-fuzz),
# KVINDEX_FUZZ_JOBS (parallel compile jobs, default 2), KVINDEX_FUZZ_BUILD_TESTS
# (default ON, see below),
# KVINDEX_FUZZ_ARGS (extra libFuzzer flags, e.g. "-max_len=65536"),
# KVINDEX_FUZZ_ONLY (an extended regex: run only the targets whose name
# matches; the budget is shared among those).
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${KVINDEX_FUZZ_BUILD:-${root}/build-fuzz}"
jobs="${KVINDEX_FUZZ_JOBS:-2}"

# The top-level CMakeLists adds tests/ (and so tests/fuzz/) only with
# KVINDEX_BUILD_TESTS=ON; the unit tests are configured but not built here.
CC=clang CXX=clang++ cmake -S "${root}" -B "${build}" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVINDEX_FUZZ=ON -DKVINDEX_SANITIZE=ON \
  -DKVINDEX_BUILD_TESTS="${KVINDEX_FUZZ_BUILD_TESTS:-ON}" >/dev/null

# Only the fuzz executables (whatever their names): every ninja output under fuzz/.
mapfile -t targets < <(ninja -C "${build}" -t targets all | sed -n 's|^\(fuzz/[^:]*\): .*|\1|p')
if [[ -n "${KVINDEX_FUZZ_ONLY:-}" ]]; then
  mapfile -t targets < <(printf '%s\n' "${targets[@]}" | sed 's|^fuzz/||' |
    grep -E "${KVINDEX_FUZZ_ONLY}" | sed 's|^|fuzz/|' || true)
fi
if [[ ${#targets[@]} -eq 0 ]]; then
  echo "run_fuzzers: no fuzz targets in ${build}" >&2
  exit 1
fi
ninja -C "${build}" -j "${jobs}" "${targets[@]}"

binaries=()
for binary in "${build}"/fuzz/*; do
  [[ -x "${binary}" && -f "${binary}" ]] || continue
  [[ -z "${KVINDEX_FUZZ_ONLY:-}" || "$(basename "${binary}")" =~ ${KVINDEX_FUZZ_ONLY} ]] || continue
  binaries+=("${binary}")
done
if [[ ${#binaries[@]} -eq 0 ]]; then
  echo "run_fuzzers: no fuzz binary to run in ${build}/fuzz" >&2
  exit 1
fi
total="${KVINDEX_FUZZ_TOTAL_SECONDS:-180}"
if [[ "${total}" -gt 0 ]]; then
  share=$((total / ${#binaries[@]}))
  [[ "${share}" -ge 1 ]] || share=1
  if [[ "${seconds}" -gt "${share}" ]]; then
    echo "run_fuzzers: ${#binaries[@]} targets in a ${total} s budget: ${share} s each" \
      "(KVINDEX_FUZZ_TOTAL_SECONDS=0 lifts the cap)"
    seconds="${share}"
  fi
fi

mkdir -p "${build}/fuzz-corpus" "${build}/fuzz-artifacts"
summary="${build}/fuzz-summary.txt"
: >"${summary}"
status=0
for binary in "${binaries[@]}"; do
  name="$(basename "${binary}")"
  corpus="${build}/fuzz-corpus/${name}"
  mkdir -p "${corpus}"
  args=(-max_total_time="${seconds}" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048
        -artifact_prefix="${build}/fuzz-artifacts/${name}-")
  [[ -f "${root}/tests/fuzz/${name}.dict" ]] && args+=(-dict="${root}/tests/fuzz/${name}.dict")
  # shellcheck disable=SC2206
  args+=(${KVINDEX_FUZZ_ARGS:-})
  dirs=("${corpus}")
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
    status=1
  fi
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "${log}" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "${log}" | tail -1)"
  cov="$(grep -o 'cov: [0-9]*' "${log}" | tail -1 | cut -d' ' -f2)"
  units="$(find "${corpus}" -type f | wc -l)"
  line="${name}: ${result}, ${seconds}s, ${execs:-?} execs (${rate:-?}/s), cov ${cov:-?}, corpus ${units} files"
  echo "${line}" | tee -a "${summary}"
  [[ "${result}" == "ok" ]] || tail -40 "${log}" >&2
done
exit "${status}"
