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
trap 'stop_session; rm -rf "$WORK"' EXIT

. "$ROOT/tests/tui/tmux_lib.sh"

absent() {  # absent TEXT: fail if TEXT is on screen now
  if screen | grep -qF -- "$1"; then echo "FAIL: '$1' on screen"; screen; exit 1; fi
  echo "ok: no $1"
}

cd "$ROOT"
G=assets/recordings/gpu
start_session 160 48 \
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
stop_session

start=$(date +%s%N)
start_session 80 24 \
  "PYTHONPATH=$ROOT $PY -m app tui --model synthetic:tiny-llama --backends slab,dense --block-size 8 --slab-blocks 4 --recordings $WORK; sleep 30"
progress=""
for _ in $(seq 1 2400); do  # 0.05 s polls: the bound (~2 min) only ends a hang
  progress="$(screen | grep -oE "starting worker|loading model|LIVE" | head -1)"
  [ -n "$progress" ] && break
  sleep 0.05
done
echo "progress on screen $(( ($(date +%s%N) - start) / 1000000 )) ms after launch (a measurement)"
if [ -z "$progress" ]; then echo "FAIL: no progress on screen ~2 min after launch"; screen; exit 1; fi
wait_for "LIVE" 60
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
