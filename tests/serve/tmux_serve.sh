#!/usr/bin/env bash
# The dashboard following a live server in a real terminal (tmux): `slabscope serve --tui` (server and dashboard in
# one command) on a tiny synthetic model, `slabscope load` driving it from outside; the screen shows the requests
# arriving (in flight) and finishing (done); quitting the dashboard stops the server and leaves no process of it.
# Usage: tests/serve/tmux_serve.sh   (exit 0 = every check passed; prints the failing screen otherwise)
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
SESSION="slabscope-serve-$$"
WORK="$(mktemp -d)"
PORT="$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
trap 'stop_session; rm -rf "$WORK"' EXIT

. "$ROOT/tests/tui/tmux_lib.sh"

cd "$ROOT"
start_session 150 40 \
  "PYTHONPATH=$ROOT $PY -m app serve --tui --model synthetic:tiny-llama --port $PORT --blas-threads 1 --temperature 0 --record $WORK/rec --log $WORK/serve.log; sleep 30"
wait_for "LIVE " 90
wait_for "slab ●" 30
PYTHONPATH=$ROOT $PY -m app load --url "http://127.0.0.1:$PORT" --scenario churn --set n=12 concurrency=2 \
  prompt_min=16 prompt_max=64 gen_min=150 gen_max=250 --chars-per-token 1 --json > "$WORK/load.json" 2>&1 &
LOAD=$!
wait_for "in flight" 60
wait_for "→ slab" 60
wait_for "0 in flight, 12 done" 240
wait "$LOAD" || { echo "FAIL: load exited $?"; cat "$WORK/load.json"; exit 1; }
grep -q '"completed": 12' "$WORK/load.json" || { echo "FAIL: load report"; cat "$WORK/load.json"; exit 1; }
echo "ok: load answered 12 of 12"
tmux send-keys -t "$SESSION" q
wait_gone 30
for _ in $(seq 1 40); do   # the server (and its engine) stop after the dashboard: SIGTERM, then at most 15 s
  pgrep -f -- "app serve --record $WORK/rec" >/dev/null || break
  sleep 0.5
done
if pgrep -f -- "app serve --record $WORK/rec" >/dev/null; then echo "FAIL: server still running"; pgrep -af -- "$WORK/rec"; exit 1; fi
if curl -s --max-time 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then echo "FAIL: port still answers"; exit 1; fi
# the server's front and engine processes, as its recording names them, are gone; the recording ended cleanly
PYTHONPATH=$ROOT $PY - "$WORK/rec" <<'PY' || exit 1
import os, sys
from pathlib import Path
from probes.replay import Session
session = Session.open(sorted(Path(sys.argv[1]).glob("*.slabrec"))[-1])
for pid in (session.meta["pid"], session.meta["serve"]["front_pid"]):
    try:
        os.kill(pid, 0)
        sys.exit(f"FAIL: process {pid} of the server is still running")
    except ProcessLookupError:
        pass
assert session.complete and session.summary.summary["serve"]["stopped_by"] == "shutdown", session.summary
print(f"ok: engine {session.meta['pid']} and front {session.meta['serve']['front_pid']} gone, recording complete")
PY
echo "ok: no process left"
