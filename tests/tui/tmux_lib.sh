# Shared by the tmux checks (sourced): start a session, read the pane of tmux session $SESSION, wait for text on it.
# Each check runs its own tmux server (a private socket named after its process): tests run side by side under
# xdist, and one shared server sizes every new window to its latest client, so an 80x24 check shrank another's
# 150x40 window and cut its lanes. Each session of a check gets a server of its own too (start_session): once the
# CI's run found no server from a check's second session on ("no server running" throughout), the likely cause a
# session started while the server of the one just killed was still exiting (inferred, not reproduced on demand).
TMUX_SERVER="slabscope-check-$$-0"
tmux() { command tmux -L "$TMUX_SERVER" "$@"; }

start_session() {  # start_session WIDTH HEIGHT COMMAND: a new session $SESSION on a new server (exit 1 if it fails)
  local previous="$TMUX_SERVER" out
  stop_session
  TMUX_SERVER="slabscope-check-$$-$(( ${TMUX_SERVER##*-} + 1 ))"
  if ! out="$(tmux new-session -d -s "$SESSION" -x "$1" -y "$2" "$3" 2>&1)"; then
    echo "FAIL: tmux could not start the session (server $TMUX_SERVER after $previous): $out"; exit 1
  fi
}

stop_session() {  # ends this check's current server and removes its socket file (tmux may leave it behind)
  tmux kill-server 2>/dev/null
  rm -f "${TMUX_TMPDIR:-/tmp}/tmux-$(id -u)/$TMUX_SERVER"
}
# The app sizes itself from COLUMNS/LINES when they are set (Textual reads them before the terminal): a test runner
# that exports them (80x24) would override the window's size, so the pane never sees them.
unset COLUMNS LINES

screen() { tmux capture-pane -p -t "$SESSION"; }

wait_for() {  # wait_for TEXT SECONDS: poll the pane until TEXT shows up (prints the screen and exits 1 otherwise)
  local text="$1" limit="$2" waited=0
  while ! screen | grep -qF -- "$text"; do
    if ! tmux has-session -t "$SESSION" 2>/dev/null; then
      echo "FAIL: waiting for '$text', the tmux session $SESSION (server $TMUX_SERVER) is gone"; exit 1
    fi
    sleep 0.5; waited=$((waited + 1))
    if [ "$waited" -ge $((limit * 2)) ]; then
      echo "FAIL: '$text' not on screen after ${limit}s"; screen; exit 1
    fi
  done
  echo "ok: $text"
}

wait_gone() {  # wait_gone SECONDS: the app left the pane (the pane's command falls back to `sleep`)
  for _ in $(seq 1 $(($1 * 2))); do
    sleep 0.5
    if ! screen | grep -qF "Memory  Slabs"; then echo "ok: quit"; return 0; fi
  done
  echo "FAIL: app still on screen $1 s after q"; screen; exit 1
}

wait_no_process() {  # wait_no_process PATTERN SECONDS: poll until no process matches PATTERN (exit 1 if one still does)
  for _ in $(seq 1 $(($2 * 10))); do
    pgrep -f -- "$1" >/dev/null || return 0
    sleep 0.1
  done
  ! pgrep -f -- "$1" >/dev/null
}
