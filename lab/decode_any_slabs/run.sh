#!/usr/bin/env bash
# Issue 25 on the H200: the fused decode at any slab count (the slab-table route, pool/kernels/slab_table.py).
#   1. `bench decode`: fused beside MLX's contiguous SDPA, B=1,16, contexts 2k, 8k, 16k, bf16 / head_dim 128 /
#      GQA 16:8 (GB/s per method): the table route at 8 and 32 rows per slab, the per-slab route
#      (SLABSCOPE_SLAB_TABLE=0) at 32.
#   2. the ragged_long record (16 requests, prompts 1k-12k, 128 generated each) at --slab-blocks 8, 32, 128 for slab,
#      dense once: tok/s, decode step, footprint (lab/record_figures.py), each record a fresh process.
# From the repository root (python3.12 + mlx CUDA + mlx-lm):   bash lab/decode_any_slabs/run.sh
# CPU dry run (tiny model, tiny sizes, bench decode skipped):   SMALL=1 bash lab/decode_any_slabs/run.sh
# The probes' cost at few vs many slabs instead (a second run, ~5 minutes):  PROBES=1 bash lab/decode_any_slabs/run.sh
# Everything prints to stdout; raw files go to $OUT (default /tmp/decode_any_slabs). Budget: under 8 minutes.
# DECODE=0 skips the `bench decode` cells (the records only); SIZES="8 128 32" picks the rows per slab and their order.
# EXTRA="--prefill-inflight 1G": more `record` flags (every record).
set -u
OUT=${OUT:-/tmp/decode_any_slabs}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
py=${PY:-python3}
if [ "${PROBES:-0}" = 1 ]; then
  # bench probes: off/on pairs at 100 Hz on a shortened ragged case; the per-sample cost and the share of wall
  if [ "${SMALL:-0}" = 1 ]; then
    probe=(--model synthetic:tiny-qwen3 --scenario ragged_long --set n=4 --set concurrency=4 --set prompt_max=300
           --set gen_min=6 --set gen_max=6 --reps 1)
    sizes="2 32"
  else
    probe=(--model synthetic:qwen3-0.6b --scenario ragged_long --set n=16 --set concurrency=16 --set prompt_min=1024
           --set prompt_max=6144 --set gen_min=64 --set gen_max=64 --reps 2 --snapshot-hz 0.5)
    sizes="8 128"
  fi
  for rows in $sizes; do
    echo "== bench probes, --slab-blocks $rows"
    timeout 280 $py -m app bench probes "${probe[@]}" --backend slab --sample-hz 100 --slab-blocks "$rows" 2>&1 | tail -n 8
  done
  exit 0
fi
if [ "${SMALL:-0}" = 1 ]; then
  model=(--model synthetic:tiny-qwen3 --dtype float32 --device cpu)
  ragged=(--scenario ragged_long --set n=4 --set concurrency=4 --set prompt_min=64 --set prompt_max=300
          --set gen_min=6 --set gen_max=6)
  sizes="2 8"
else
  $py -c "import msgspec" 2>/dev/null || $py -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/msgspec-*.whl
  model=(--model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu --sample-hz 100)
  ragged=(--scenario ragged_long --set n=16 --set concurrency=16 --set prompt_min=1024 --set prompt_max=12288
          --set gen_min=128 --set gen_max=128)
  sizes=${SIZES:-8 32 128}
  timeout 120 $py -m app warmup --model synthetic:qwen3-0.6b "${ragged[@]}" --json > /dev/null 2>&1
  # (route, rows per slab): the table route at 8 and 32 rows per slab (4x the slabs at 8: 1,024 at B=16, 16k), the
  # per-slab route at 32 (256 slabs; at 8 it would exceed its 512 slab inputs)
  cells='"1 8" "1 32" "0 32"'; [ "${DECODE:-1}" = 0 ] && cells=""  # DECODE=0: the records only
  eval "set -- $cells"
  for cell in "$@"; do
    set -- $cell
    route=$1 rows=$2
    {
      echo "== bench decode: SLABSCOPE_SLAB_TABLE=$route (1: table route, 0: per-slab inputs), --slab-blocks $rows"
      SLABSCOPE_SLAB_TABLE=$route timeout 110 $py -m app bench decode --batches 1,16 --contexts 2048,8192,16384 \
        --n-q-heads 16 --n-kv-heads 8 --head-dim 128 --dtype bfloat16 --layout multi --slab-blocks $rows \
        --out "$OUT/decode_t${route}_s${rows}.json" 2>&1 | tail -n 12
    }
  done
fi
for rows in $sizes; do
  backends=slab
  [ "$rows" = "${sizes%% *}" ] && backends=slab,dense  # dense does not depend on the slab size: once
  echo "== ragged_long record, --slab-blocks $rows, $backends (fresh process)"
  timeout 150 $py -m app record "${ragged[@]}" "${model[@]}" ${EXTRA:-} --backends $backends --slab-blocks "$rows" \
    --out "$OUT/ragged_$rows" > "$OUT/ragged_$rows.txt" 2>&1
  echo "record exit $?"
  $py -m lab.record_figures "$OUT/ragged_$rows" 2>&1 | head -n 30
done
