#!/usr/bin/env bash
# Issue 25's ragged record at several rows per slab, in interleaved fresh processes: ROUNDS rounds, each one
# `slabscope record --backends slab` per size of SIZES (the order rotates by round), printing the record's figures
# (lab/record_figures.py: tok/s, decode step, footprint, probe share) and its probe-cost line. SPLIT=1 also writes
# where the probes' CPU went per function and thread (lab/probe_cost/worker_split) to $OUT/split_<round>_<rows>.<pid>
# and prints its first lines. From the repository root on the GPU (python3.12 + mlx CUDA + mlx-lm):
#   ROUNDS=3 SIZES="32 128" bash lab/decode_any_slabs/ragged_rounds.sh     (about 40 s a record on the H200)
# CPU dry run: SMALL=1 ROUNDS=1 bash lab/decode_any_slabs/ragged_rounds.sh
set -u
OUT=${OUT:-/tmp/ragged_rounds}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
py=${PY:-python3}
if [ "${SMALL:-0}" = 1 ]; then
  model=(--model synthetic:tiny-qwen3 --dtype float32 --device cpu --sample-hz 100)
  ragged=(--scenario ragged_long --set n=3 --set concurrency=3 --set prompt_max=300 --set gen_min=4 --set gen_max=4)
else
  model=(--model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu --sample-hz 100)
  ragged=(--scenario ragged_long --set n=16 --set concurrency=16 --set prompt_min=1024 --set prompt_max=12288
          --set gen_min=128 --set gen_max=128)
fi
read -r -a sizes <<< "${SIZES:-32 128}"
for round in $(seq 1 "${ROUNDS:-3}"); do
  shift_by=$(( (round - 1) % ${#sizes[@]} ))
  order=("${sizes[@]:shift_by}" "${sizes[@]:0:shift_by}")
  for rows in "${order[@]}"; do
    name="r${round}_${rows}"
    split=(); [ "${SPLIT:-0}" = 1 ] && split=(env PROBE_SPLIT="$OUT/split_$name" PYTHONPATH=lab/probe_cost/worker_split:.)
    echo "== round $round, --slab-blocks $rows (fresh process)"
    timeout "${LIMIT:-90}" "${split[@]}" $py -m app record "${ragged[@]}" "${model[@]}" --backends slab \
      --slab-blocks "$rows" --out "$OUT/$name" > "$OUT/$name.txt" 2>&1
    echo "record exit $?"
    grep "probe cost" "$OUT/$name.txt"
    $py -m lab.record_figures "$OUT/$name" 2>&1 | grep "^slab"
    [ "${SPLIT:-0}" = 1 ] && cat "$OUT/split_$name".* 2>/dev/null | head -n 9
  done
done
