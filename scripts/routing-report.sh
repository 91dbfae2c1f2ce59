#!/usr/bin/env bash
# The routing-quality report (issue #12): kv-aware placement through kvindex
# against round-robin, random and least-loaded, on the bundled Mooncake
# traces at 8, 16 and 64 workers. Installs what is needed, builds (Release),
# runs scripts/routing_report.py and writes docs/results.md, docs/results.png
# (gnuplot) and docs/results.json. Extra arguments go to routing_report.py
# (--workers 8,16 --limit 2000 ...).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "${KVINDEX_JOBS:-2}" --target kvindex-router kvindex-mockengine

exec /usr/bin/python3 scripts/routing_report.py --bin-dir build/bin "$@"
