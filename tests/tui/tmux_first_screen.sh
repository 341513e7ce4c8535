#!/usr/bin/env bash
# The first screen and progress in a real terminal (tmux), at 160x48 and 80x24 (issue 27):
# 1. 160x48, the README's replay command: the whole-run verdict (0.54x, gate ok, no EXCEEDED), the footer to its
#    last key, Sessions listing the subfolder; quit.
# 2. 80x24, a live run of a tiny model: progress on the status bar from launch ("starting worker" / "loading model";
#    the seconds it took are printed, a measurement, not a bound), then "(finished)" only at the end; a second run
#    from the form stopped with x while it loads reads "stopped"; the footer to its last key; quit.
# Usage: tests/tui/tmux_first_screen.sh   (exit 0 = every check passed; prints the failing screen otherwise)
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
SESSION="slabscope-first-$$"
WORK="$(mktemp -d)"
trap 'tmux kill-session -t "$SESSION" 2>/dev/null; rm -rf "$WORK"' EXIT

. "$ROOT/tests/tui/tmux_lib.sh"

absent() {  # absent TEXT: fail if TEXT is on screen now
  if screen | grep -qF -- "$1"; then echo "FAIL: '$1' on screen"; screen; exit 1; fi
  echo "ok: no $1"
}

cd "$ROOT"
G=assets/recordings/gpu
tmux new-session -d -s "$SESSION" -x 160 -y 48 \
  "PYTHONPATH=$ROOT $PY -m app --open $G/distinct_burst-slab.slabrec --open $G/distinct_burst-dense.slabrec --open $G/distinct_burst-monolithic.slabrec; sleep 30"
wait_for "whole run: slab/dense" 60
wait_for "0.54x (gate 1.15x ok)" 10
wait_for "at cursor t=4.0s" 10
wait_for "q quit" 10
absent "EXCEEDED"
tmux send-keys -t "$SESSION" 7
wait_for "nccl2/" 10
tmux send-keys -t "$SESSION" q
wait_gone 10
tmux kill-session -t "$SESSION" 2>/dev/null

start=$(date +%s%N)
tmux new-session -d -s "$SESSION" -x 80 -y 24 \
  "PYTHONPATH=$ROOT $PY -m app tui --model synthetic:tiny-llama --backends slab,dense --block-size 8 --slab-blocks 4 --recordings $WORK; sleep 30"
for _ in $(seq 1 240); do
  if screen | grep -qE "starting worker|loading model"; then break; fi
  sleep 0.05
done
echo "progress on screen $(( ($(date +%s%N) - start) / 1000000 )) ms after launch (a measurement)"
wait_for "LIVE" 5
absent "(finished)"
wait_for "LIVE (finished)" 180
wait_for "q quit" 5
tmux send-keys -t "$SESSION" n
wait_for "New live run" 30
tmux send-keys -t "$SESSION" C-s
wait_for "loading model" 60
tmux send-keys -t "$SESSION" x
wait_for "LIVE (stopped)" 30
wait_for "■ stopped" 5
absent "signal"
tmux send-keys -t "$SESSION" q
wait_gone 15
