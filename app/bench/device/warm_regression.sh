#!/usr/bin/env bash
# Issue 13's open check: is slab's warm decode step slower at this tree than at an older commit, and is open blocks
# "high" the cause? Two parts, each optional:
#   1. WOB_ROUNDS > 0: warm_open_blocks.py (slab alone, high against low, warm rounds in one process) -> $OUT/wob.txt
#   2. WORKLOADS (burst, heavy or both): `slabscope bench throughput --engines dense,slab` at this tree and at
#      $OLD_TREE (an extracted `git archive` of the older commit), the two trees alternating which goes first per
#      workload (burst: old first; heavy: new first), dense in both as the machine's control -> $OUT/<w>_<tree>.txt
# From the repository root, on the GPU (after issue13_setup.sh's install; OLD_TREE has its own warm-up):
#
#   git archive 0eb0f83 -o .whl/old.tar   # here, before the call; on the device:
#   mkdir -p /tmp/old && tar -xf .whl/old.tar -C /tmp/old
#   OUT=$OUT OLD_TREE=/tmp/old WOB_ROUNDS=5 WORKLOADS="burst" bash app/bench/device/warm_regression.sh
OUT=${OUT:-/tmp/regression}
mkdir -p "$OUT"
source "$(dirname "$0")/issue13_setup.sh"  # sets py, burst, heavy; builds this tree's kernels
here=$PWD
if [ -n "$OLD_TREE" ]; then  # the old tree's kernels into the same cache, before anything is timed
  (cd "$OLD_TREE" && timeout 120 $py -m app warmup --model synthetic:qwen3-0.6b "${burst[@]}" >/dev/null 2>&1
   timeout 120 $py -m app warmup --model synthetic:qwen3-0.6b "${heavy[@]}" >/dev/null 2>&1)
fi
if (( ${WOB_ROUNDS:-0} > 0 )); then
  timeout 300 $py app/bench/device/warm_open_blocks.py --rounds "$WOB_ROUNDS" > "$OUT/wob.txt" 2>&1
  echo "warm_open_blocks: exit $?"
fi
bench() {  # workload tree-name tree-dir: one bench throughput of dense and slab, warm rounds only
  local name=$1 tree=$2 dir=$3 args
  if [ "$name" = burst ]; then args=("${burst[@]}"); else args=("${heavy[@]}"); fi
  (cd "$dir" && timeout 240 $py -m app bench throughput "${args[@]}" --model synthetic:qwen3-0.6b --dtype bfloat16 \
    --device gpu --engines dense,slab --rounds "${BENCH_ROUNDS:-5}" --fresh-rounds 0) > "$OUT/${name}_$tree.txt" 2>&1
  echo "bench $name $tree: exit $?"
}
for w in ${WORKLOADS:-}; do
  if [ "$w" = burst ]; then bench "$w" old "$OLD_TREE"; bench "$w" new "$here"
  else bench "$w" new "$here"; bench "$w" old "$OLD_TREE"; fi
done
