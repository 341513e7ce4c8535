#!/usr/bin/env bash
# The kernel's split target against the slab decode step (issue 13, item 5): a split launch adds a merge launch per
# layer, so a target of one wave of blocks ($SLABSCOPE_DECODE_TARGET_BLOCKS=128: one split on the decode-heavy case)
# saves a launch per layer of host time at the price of longer blocks on the device. engine_anatomy.py (slab alone,
# 2 warm rounds after a warm-up round) per workload and target, one process each, the order alternating; then
# tests/gpu under the last target. Files in $OUT: <workload>_<target>.txt, gpu_tests_<target>.txt. On the GPU:
#
#   OUT=$OUT TARGETS="8192 128" bash app/bench/device/split_target_ab.sh
OUT=${OUT:-/tmp/split_target}
mkdir -p "$OUT"
source "$(dirname "$0")/issue13_setup.sh"  # sets py, burst, heavy; builds the default target's kernels
anatomy() {  # workload target
  local sets
  if [ "$1" = burst ]; then sets=("${burst[@]:2}"); else sets=("${heavy[@]:2}"); fi
  SLABSCOPE_DECODE_TARGET_BLOCKS=$2 timeout 80 $py app/bench/device/engine_anatomy.py "${sets[@]}" --backends slab \
    --rounds 2 > "$OUT/${1}_$2.txt" 2>&1
  echo "$1 $2: $(tail -1 "$OUT/${1}_$2.txt")"
}
targets=(${TARGETS:-8192 128})
for t in "${targets[@]}"; do anatomy heavy "$t"; done
for (( i=${#targets[@]}-1; i>=0; i-- )); do anatomy burst "${targets[$i]}"; done
last=${targets[-1]}
SLABSCOPE_DECODE_TARGET_BLOCKS=$last timeout 60 $py -m pytest -q -x tests/gpu -p no:cacheprovider \
  > "$OUT/gpu_tests_$last.txt" 2>&1
echo "tests/gpu at $last: $(tail -1 "$OUT/gpu_tests_$last.txt")"
