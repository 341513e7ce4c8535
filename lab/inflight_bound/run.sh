#!/usr/bin/env bash
# Does the prefill in-flight bound (app/workloads/inflight_bound.py) cut the ragged record's footprint, and what does
# it cost prefill? On the H200 (python3.12 + mlx CUDA + mlx-lm), from the repository root:
#   1. issue 25's ragged record (16 requests, prompts 1k-12k, 128 generated, --slab-blocks 32), each a fresh process:
#      slab and dense unbounded, then slab at each allowance of BOUNDS and dense at the first (lab/record_figures.py:
#      tok/s, decode step, footprint).
#   2. the burst's prefill in warm interleaved rounds: dense, slab and both under the first allowance
#      (lab/batched_prefill/anatomy.py: prefill tok/s and peak active memory per round, median and range).
#   bash lab/inflight_bound/run.sh            SMALL=1 bash lab/inflight_bound/run.sh (CPU dry run, tiny sizes)
# BOUNDS="1G 2G" (allowances), PARTS="ragged burst" (also: heavy, geometry: the anatomy on issue 26's other shapes;
# sizes: slab records at SIZES="8 128" rows per slab under the first allowance), VARIANTS (the anatomy's),
# EXTRA (more `record` flags, e.g. "--prefill-trim off"), OUT (raw files, default /tmp/inflight_bound). Under 9 minutes.
set -u
OUT=${OUT:-/tmp/inflight_bound}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
py=${PY:-python3}
bounds=(${BOUNDS:-1G 2G})
if [ "${SMALL:-0}" = 1 ]; then
  model=(--model synthetic:tiny-qwen3 --dtype float32 --device cpu)
  ragged=(--scenario ragged_long --set n=4 --set concurrency=4 --set prompt_min=64 --set prompt_max=300
          --set gen_min=6 --set gen_max=6)
  burst=(--model synthetic:tiny-qwen3 --dtype float32 --device cpu --set n=2 --set prompt_tokens=128
         --set gen_tokens=2 --rounds 1)
else
  $py -c "import msgspec" 2>/dev/null || $py -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/msgspec-*.whl
  model=(--model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu --sample-hz 100)
  ragged=(--scenario ragged_long --set n=16 --set concurrency=16 --set prompt_min=1024 --set prompt_max=12288
          --set gen_min=128 --set gen_max=128)
  burst=(--rounds ${ROUNDS:-4})
fi
record() {  # label, backends, allowance, rows per slab (default 32)
  echo "== ragged_long record, --slab-blocks ${4:-32}, $2, --prefill-inflight $3 (fresh process)"
  timeout 200 $py -m app record "${ragged[@]}" "${model[@]}" --backends "$2" --slab-blocks "${4:-32}" \
    --prefill-inflight "$3" ${EXTRA:-} --out "$OUT/$1" > "$OUT/$1.txt" 2>&1
  echo "record exit $?"
  $py -m lab.record_figures "$OUT/$1" 2>&1 | head -n 30
  for rec in "$OUT/$1"/*.slabrec; do  # where the probes' cost goes (sampler thread, workload side, snapshots)
    $py -c "import sys; from probes.replay import Session; print(sys.argv[1].rsplit('/', 1)[-1], Session.open(sys.argv[1]).overhead)" "$rec" 2>&1 | tail -n 1
  done
}
for part in ${PARTS:-ragged burst}; do
  case $part in
    ragged)
      record off slab,dense off
      for b in "${bounds[@]}"; do record "slab_$b" slab "$b"; done
      record "dense_${bounds[0]}" dense "${bounds[0]}" ;;
    sizes)  # slab at other rows per slab under the first allowance
      for rows in ${SIZES:-8 128}; do record "slab_${bounds[0]}_rows$rows" slab "${bounds[0]}" "$rows"; done ;;
    burst|heavy|geometry)
      shape=(); [ "$part" = heavy ] && shape=(--set n=16 --set prompt_tokens=2048 --set gen_tokens=256)
      [ "$part" = geometry ] && shape=(--model synthetic:llama-0.8b --set n=16 --set prompt_tokens=2048 --set gen_tokens=128)
      [ "${SMALL:-0}" = 1 ] && shape=()
      echo "== $part prefill, warm interleaved rounds, allowance ${bounds[0]}"
      timeout 200 $py -m lab.batched_prefill.anatomy "${burst[@]}" "${shape[@]}" --variants "${VARIANTS:-dense,slab,slab-bound,dense-bound}" \
        --inflight "${bounds[0]}" 2>&1 | grep -v "^round " | tail -n 30 ;;
  esac
done
