#!/usr/bin/env bash
# Issue 25 item 2 on the H200: the fused decode kernel's bandwidth at B >= 8 and its fixed cost at B = 1, this tree
# against an older one, in interleaved fresh processes of `bench decode` (B=1, 8, 16 x 8k, 16k; qwen3-0.6b's
# attention geometry: bf16, 16 query heads, 8 KV heads, head_dim 128, block 32, 32 blocks a slab).
# From the repository root (python3.12 + mlx CUDA):
#   BASE=lab/scratch/base PART=tests|bench|host bash lab/decode_bandwidth/run.sh
# BASE: a copy of the older tree's pool/ app/ probes/ (e.g. `git archive 945fea6 pool app probes | tar -x -C DIR`).
# PART=tests: the kernel's GPU tests; bench: ROUNDS rounds (default 5) of (base, base with --min-chunk-tokens 1024,
# this tree), order rotating, then the summary table (summarize.py); host: where a B=1 and a B=8 call's time goes
# (host_split.py) and what each launch costs (launch_cost.py). Raw JSON in $OUT (default /tmp/decode_bandwidth).
set -u
OUT=${OUT:-/tmp/decode_bandwidth}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
here=$(pwd)
cells=(--batches 1,8,16 --contexts 8192,16384 --n-q-heads 16 --n-kv-heads 8 --head-dim 128 --dtype bfloat16
       --layout multi)
bench() {  # bench TREE_DIR LABEL ROUND [flags...]
  local dir=$1 label=$2 round=$3
  shift 3
  (cd "$dir" && PYTHONPATH=. timeout 170 python3 -m app.commands.bench_decode "${cells[@]}" "$@" --json \
     --out "$OUT/${label}_r${round}.json" > /dev/null 2> "$OUT/${label}_r${round}.log") \
    || { echo "== $label round $round failed:"; tail -n 5 "$OUT/${label}_r${round}.log"; }
}
case "${PART:-bench}" in
  tests)
    PYTHONPATH=. timeout 500 python3 -m pytest -q tests/gpu 2>&1 | tail -n 5 ;;
  bench)
    for round in $(seq "${FIRST:-1}" "${ROUNDS:-5}"); do
      case $((round % 3)) in
        1) bench "$BASE" base "$round"; bench "$BASE" base1024 "$round" --min-chunk-tokens 1024; bench "$here" new "$round" ;;
        2) bench "$here" new "$round"; bench "$BASE" base "$round"; bench "$BASE" base1024 "$round" --min-chunk-tokens 1024 ;;
        0) bench "$BASE" base1024 "$round" --min-chunk-tokens 1024; bench "$here" new "$round"; bench "$BASE" base "$round" ;;
      esac
      echo "== round $round done ($(date +%T))"
    done
    PYTHONPATH=. python3 -m lab.decode_bandwidth.summarize "$OUT" ;;
  host)
    for batch in 1 8; do
      PYTHONPATH=. timeout 200 python3 -m lab.decode_bandwidth.host_split --batch "$batch" --rounds 5
      PYTHONPATH=. timeout 200 python3 -m lab.decode_bandwidth.launch_cost --batch "$batch" --rounds 5
    done ;;
esac
