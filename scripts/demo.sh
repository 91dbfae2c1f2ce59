#!/usr/bin/env bash
# The README demo: installs dependencies, builds kvindex (Release), starts
# four simulated vLLM engines replaying the Mooncake trace, runs
# `kvindex-router --embedded` on their ZMQ streams, and queries it.
#
# Env: KVINDEX_DEMO_REQUESTS (default 400), KVINDEX_DEMO_PORT (HTTP, default 8080),
#      KVINDEX_DEMO_KEEP=1 keeps the router running until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "${KVINDEX_JOBS:-2}" --target kvindex-router kvindex-mockengine kvindex-ctl

TRACE="${KVINDEX_TRACE:-data/mooncake/conversation_trace.jsonl}"
if [ ! -f "$TRACE" ]; then
  echo "demo: trace not found at $TRACE (set KVINDEX_TRACE)" >&2
  exit 1
fi
REQUESTS="${KVINDEX_DEMO_REQUESTS:-400}"
HTTP_PORT="${KVINDEX_DEMO_PORT:-8080}"
PUB_BASE=25557
REPLAY_BASE=25657
WORKERS=4
DATA_DIR="$(mktemp -d /tmp/kvindex-demo.XXXXXX)"
BIN=build/bin

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DATA_DIR"
}
trap cleanup EXIT INT TERM

echo "== starting $WORKERS simulated vLLM engines (ports $PUB_BASE.., replay $REPLAY_BASE..)"
"$BIN/kvindex-mockengine" --trace "$TRACE" --workers "$WORKERS" \
  --pub-base-port "$PUB_BASE" --replay-base-port "$REPLAY_BASE" \
  --limit "$REQUESTS" --rate 200 --device-capacity 4096 --host-capacity 4096 \
  --start-delay 1500ms &
pids+=($!)

sources=()
for ((i = 0; i < WORKERS; i++)); do
  sources+=(--source "worker=w$i,engine=vllm,model=demo-model,block_size=16,pub=tcp://127.0.0.1:$((PUB_BASE + i)),replay=tcp://127.0.0.1:$((REPLAY_BASE + i))")
done
echo "== starting kvindex-router --embedded on 127.0.0.1:$HTTP_PORT"
"$BIN/kvindex-router" --embedded "${sources[@]}" --data-dir "$DATA_DIR" \
  --http "127.0.0.1:$HTTP_PORT" &
pids+=($!)

ROUTER="http://127.0.0.1:$HTTP_PORT"
for _ in $(seq 1 100); do
  curl -sf "$ROUTER/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done
# Let the engines replay the trace slice.
sleep $(( REQUESTS / 200 + 3 ))

echo "== kvindex-ctl state"
"$BIN/kvindex-ctl" state --router "$ROUTER"
echo "== kvindex-ctl workers"
"$BIN/kvindex-ctl" workers --router "$ROUTER"
# A prompt served last (still on device) and one served earlier (offloaded
# to the host tier since), both from the trace slice the engines replayed.
for request in $((REQUESTS - 1)) $((REQUESTS - 60)); do
  PROMPT=$("$BIN/kvindex-mockengine" --trace "$TRACE" --print-prompt "$request")
  echo "== kvindex-ctl match: prompt of trace request $request ($(echo "$PROMPT" | tr ',' '\n' | wc -l) tokens)"
  "$BIN/kvindex-ctl" match --router "$ROUTER" --model demo-model --tokens "$(echo "$PROMPT" | tr -d '[]')"
done
echo "== the same over HTTP: POST /v1/match"
curl -s -X POST "$ROUTER/v1/match" -H 'content-type: application/json' \
  -d "{\"model\": \"demo-model\", \"tokens\": $PROMPT}"
echo
if [ "${KVINDEX_DEMO_KEEP:-0}" = "1" ]; then
  echo "== router running at $ROUTER (Ctrl-C to stop)"
  wait
fi
echo "== demo done"
