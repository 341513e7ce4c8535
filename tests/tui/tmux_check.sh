#!/usr/bin/env bash
# Drive the real slabscope TUI in a real terminal (tmux): a live run on a tiny synthetic model, the Slabs view,
# the Sessions view, opening a shipped recording, the inspector, then quit. Checks the screen text at each step.
# Usage: tests/tui/tmux_check.sh   (exit 0 = every check passed; prints the failing screen otherwise)
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
SESSION="slabscope-check-$$"
WORK="$(mktemp -d)"
cp "$ROOT"/assets/recordings/*.slabrec "$WORK"/
touch -d "2020-01-01" "$WORK"/sample-churn-dense.slabrec   # the slab session is the newest: listed first
trap 'stop_session; rm -rf "$WORK"' EXIT

. "$ROOT/tests/tui/tmux_lib.sh"

cd "$ROOT"
start_session 100 32 \
  "PYTHONPATH=$ROOT $PY -m app tui --model synthetic:tiny-llama --backends slab,dense --block-size 8 --slab-blocks 4 --recordings $WORK; sleep 30"
wait_for "Memory  Slabs" 30
wait_for "slab/dense" 90
wait_for "dense ✓" 120
wait_for "slab ✓" 120
tmux send-keys -t "$SESSION" 2
wait_for "rows live" 10
tmux send-keys -t "$SESSION" 7
wait_for "sample-churn-slab.slabrec" 10
tmux send-keys -t "$SESSION" Enter
wait_for "REPLAY" 20
tmux send-keys -t "$SESSION" P 6   # a replay opens at its end (all released): the peak has sequences to inspect
wait_for "sequences" 10
tmux send-keys -t "$SESSION" e
wait_for "gather runs:" 10
tmux send-keys -t "$SESSION" q
wait_gone 10   # quitting must not hang: the pane falls back to `sleep` once the app exits
