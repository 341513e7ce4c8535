# Shared by the tmux checks (sourced): read the pane of tmux session $SESSION and wait for text on it.
# Each check runs its own tmux server (a private socket named after its process): tests run side by side under
# xdist, and one shared server sizes every new window to its latest client, so an 80x24 check shrank another's
# 150x40 window and cut its lanes. The server goes when the check's trap kills its one session.
tmux() { command tmux -L "slabscope-check-$$" "$@"; }
# The app sizes itself from COLUMNS/LINES when they are set (Textual reads them before the terminal): a test runner
# that exports them (80x24) would override the window's size, so the pane never sees them.
unset COLUMNS LINES

screen() { tmux capture-pane -p -t "$SESSION"; }

wait_for() {  # wait_for TEXT SECONDS: poll the pane until TEXT shows up (prints the screen and exits 1 otherwise)
  local text="$1" limit="$2" waited=0
  while ! screen | grep -qF -- "$text"; do
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
