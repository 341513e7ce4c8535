#!/usr/bin/env bash
# Issue 25 on the H200: the ragged command of the issue (churn, 16 requests all in flight, prompts 1k-12k, 128
# generated, prefill chunks of 256) at --slab-blocks 8, 32 and 128, each record a fresh process, with the table
# gather (pool/kernels/table_gather.py: prefill history in one launch per layer) and, at 8 rows per slab, without
# it (SLABSCOPE_TABLE_GATHER=0), dense once. Prints lab/record_figures.py's line per backend.
# From the repository root (python3.12 + mlx CUDA + mlx-lm):   bash lab/table_gather/run.sh
#   CELLS="8:1:slab,dense 32:1:slab" picks cells (rows:table-gather:backends); GPU tests first unless TESTS=0.
# CPU dry run (tiny model, tiny sizes):   SMALL=1 bash lab/table_gather/run.sh
set -u
OUT=${OUT:-/tmp/table_gather}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
py=${PY:-python3}
if [ "${SMALL:-0}" = 1 ]; then
  model=(--model synthetic:tiny-qwen3 --dtype float32 --device cpu)
  ragged=(--scenario churn --set n=4 --set concurrency=4 --set prompt_min=64 --set prompt_max=300
          --set gen_min=6 --set gen_max=6)
  cells=${CELLS:-"2:1:slab,dense 8:1:slab"}
else
  $py -c "import msgspec" 2>/dev/null || $py -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/msgspec-*.whl
  model=(--model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu)
  ragged=(--scenario churn --set n=16 --set concurrency=16 --set prompt_min=1024 --set prompt_max=12288
          --set gen_min=128 --set gen_max=128)
  cells=${CELLS:-"8:1:slab,dense 8:0:slab 32:1:slab 128:1:slab"}
  if [ "${TESTS:-1}" = 1 ]; then
    timeout 200 $py -m pytest -q -p no:cacheprovider tests/gpu/test_table_gather_gpu.py tests/gpu/test_slab_table_gpu.py \
      2>&1 | tail -n 4
  fi
  timeout 120 $py -m app warmup --model synthetic:qwen3-0.6b "${ragged[@]}" --json > /dev/null 2>&1
fi
for cell in $cells; do
  IFS=: read -r rows gather backends <<< "$cell"
  dir="$OUT/ragged_s${rows}_g${gather}"
  rm -rf "$dir"
  echo "== churn ragged record, --slab-blocks $rows, SLABSCOPE_TABLE_GATHER=$gather, $backends (fresh process)"
  SLABSCOPE_TABLE_GATHER=$gather timeout ${RECORD_TIMEOUT:-170} $py -m app record "${ragged[@]}" "${model[@]}" \
    --backends "$backends" --slab-blocks "$rows" --out "$dir" > "$dir.txt" 2>&1
  echo "record exit $?"
  $py -m lab.record_figures "$dir" 2>&1 | head -n 30
done
