#!/usr/bin/env bash
# The README quick start: installs dependencies, builds kvindex (Release) and
# runs a simulated cluster that routes with kvindex (scripts/demo_cluster.py):
# simulated vLLM engines serve the Mooncake trace, each request placed by
# asking `kvindex-router --embedded` which engine holds its prefix, with a
# live view; then the API stays up with commands to try (Ctrl-C stops it).
# Under CI=true or without a terminal it prints plain lines and exits 0.
#
# Env: KVINDEX_DEMO_REQUESTS (default 3000), KVINDEX_DEMO_WORKERS (8),
#      KVINDEX_DEMO_RATE (requests/s, 150), KVINDEX_DEMO_PORT (HTTP, 8080),
#      KVINDEX_DEMO_TRUTH_PORT (the simulator's truth API, 8090),
#      KVINDEX_DEMO_KEEP=0 exits at the end even on a terminal.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "${KVINDEX_JOBS:-2}" --target kvindex-router kvindex-mockengine kvindex-ctl

exec /usr/bin/python3 scripts/demo_cluster.py --bin-dir build/bin
