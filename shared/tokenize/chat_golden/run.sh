#!/usr/bin/env bash
# ctest chat_golden: the model files come from the tokenizer exactness
# reference (fetch-reference.sh: exit 77 = skipped, a failure under CI=true);
# golden.jsonl beside this script holds the expected ids.
#   run.sh CHECK_BINARY
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
set +e
modules="$("$here/../exactness/fetch-reference.sh")"
rc=$?
set -e
[ "$rc" -eq 0 ] || exit "$rc"
exec "$1" "$modules" "$here/golden.jsonl"
