#!/usr/bin/env bash
# Drive the real slabscope TUI in a real terminal (tmux) through a live distributed run: `tui --ranks 2` runs
# `record --ranks 2` in the background (mlx.launch, ring, two CPU ranks of a tiny llama) and follows the growing rank
# recordings; the Ranks view, a rank's pool view, then quit mid-run: the app must exit promptly and leave no process
# of the run behind. Then the stopped run's recordings open as one run. Checks the screen text at each step.
# Usage: tests/tui/tmux_ranks.sh   (exit 0 = every check passed; prints the failing screen otherwise)
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
SESSION="slabscope-ranks-$$"
WORK="$(mktemp -d)"
trap 'stop_session; pkill -KILL -f "$WORK/ranks-" 2>/dev/null; rm -rf "$WORK"' EXIT
cat > "$WORK/long.toml" <<'TOML'
description = "churn long enough to quit in the middle"
[params]
n = 400
[[phases]]
name = "churn"
kind = "requests"
count = "$n"
concurrency = 3
prompt_tokens = [24, 96]
gen_tokens = [8, 24]
TOML

. "$ROOT/tests/tui/tmux_lib.sh"

cd "$ROOT"
start_session 130 40 \
  "PYTHONPATH=$ROOT $PY -m app tui --ranks 2 --model synthetic:tiny-llama --backends slab,dense --scenario $WORK/long.toml --block-size 8 --slab-blocks 4 --recordings $WORK; sleep 60"
tmux resize-window -t "$SESSION" -x 130 -y 40 2>/dev/null  # a tmux server started elsewhere may size it otherwise
wait_for "Memory  Slabs" 30
wait_for "slab r1 ●" 150
tmux send-keys -t "$SESSION" 8
# bounds only end a hang (wait_for polls): 30 s, as a loaded 2-core runner redrawing two growing ranks has taken
# more than 10 s to answer a key
wait_for "slab: 2 ranks via mlx.launch (ring)  clock bound" 30
wait_for "r1 ● " 30
wait_for "max/min" 30
tmux send-keys -t "$SESSION" 2
tmux send-keys -t "$SESSION" w
wait_for "slab r1 (slab) @" 30
tmux send-keys -t "$SESSION" q
wait_gone 20
if ! wait_no_process "$WORK/ranks-" 60; then  # polls until none is left; the bound only ends a hang
  echo "FAIL: processes of the run left behind:"; pgrep -af "$WORK/ranks-"; exit 1
fi
echo "ok: no process left"
RUN_DIR="$(ls -d "$WORK"/ranks-*)"
stop_session
start_session 130 40 "PYTHONPATH=$ROOT $PY -m app tui --open $RUN_DIR; sleep 30"
tmux resize-window -t "$SESSION" -x 130 -y 40 2>/dev/null
wait_for "REPLAY" 30
tmux send-keys -t "$SESSION" 8
wait_for "slab: 2 ranks via mlx.launch (ring)" 10
wait_for "r1 ✗ " 10
wait_for "SIGTERM received" 10
tmux send-keys -t "$SESSION" q
wait_gone 10
