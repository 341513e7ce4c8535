#!/usr/bin/env bash
# The first fused decode step, open blocks high against low, fresh processes interleaved. Each round: the burst's
# record (`slabscope record ... --backends slab,dense`; the slab pool at its default, --open-blocks auto =
# high) and the same record of slab alone with --open-blocks low; odd rounds run high first (slab before dense),
# even rounds low first (dense before slab). ROUNDS_BURST rounds of the
# burst, ROUNDS_HEAVY of the decode-heavy case; then FIRST_STEP_ROUNDS fresh processes per policy of
# lab/first_step/first_step.py (graph build of the first decode steps). Everything ends in $OUT/ab.tar.gz: compare
# tables (<case><round><arm>.txt), recordings (<case><round><arm>/), first_step.py's JSON lines (first_step.jsonl);
# `python3 -m lab.open_blocks.report DIR` (DIR: the archive unpacked) prints the tables. From the repository root,
# on the GPU:
#
#   OUT=/tmp/ab ROUNDS_BURST=5 ROUNDS_HEAVY=3 FIRST_STEP_ROUNDS=2 bash lab/open_blocks/record_ab.sh
OUT=${OUT:-/tmp/ab}
source "$(dirname "$0")/../device_setup.sh"
high() {  # name round order args...: the record, the pool at its default (open blocks high)
  local name=$1 r=$2 order=$3; shift 3
  timeout 120 $py -m app record "$@" "${model[@]}" --backends $order --out "$OUT/$name${r}high" \
    > "$OUT/$name${r}high.txt" 2>&1
  echo "$name${r}high ($order): exit $?"
}
low() {  # name round args...: slab alone with --open-blocks low
  local name=$1 r=$2; shift 2
  timeout 120 $py -m app record "$@" "${model[@]}" --backends slab --open-blocks low --out "$OUT/$name${r}low" \
    > "$OUT/$name${r}low.txt" 2>&1
  echo "$name${r}low: exit $?"
}
series() {  # name rounds args...: odd rounds high first (slab before dense), even rounds low first (dense first)
  local name=$1 rounds=$2; shift 2
  for r in $(seq 1 "$rounds"); do
    if (( r % 2 )); then high "$name" "$r" slab,dense "$@"; low "$name" "$r" "$@"
    else low "$name" "$r" "$@"; high "$name" "$r" dense,slab "$@"; fi
  done
}
mkdir -p "$OUT"
series burst "${ROUNDS_BURST:-5}" "${burst[@]}"
series heavy "${ROUNDS_HEAVY:-3}" "${heavy[@]}"
for r in $(seq 1 "${FIRST_STEP_ROUNDS:-0}"); do
  for policy in high low; do
    timeout 90 $py -m lab.first_step.first_step --backend slab --steps 4 --open-blocks $policy \
      2>/dev/null | tail -1 >> "$OUT/first_step.jsonl"
  done
done
# everything in one archive (the device tool returns a limited number of files)
(cd "$OUT" && tar -czf ../ab.tar.gz . && rm -rf ./* && mv ../ab.tar.gz .)
