#!/usr/bin/env bash
# Two-GPU tensor-parallel figures (docs/distributed.md): distinct_burst on synthetic:qwen3-0.6b (bf16) recorded tensor-parallel over 2 ranks
# through mlx.launch's NCCL backend (one recording per rank and backend), the same workload in one process beside
# it, and the merged compare table (imbalance row, per-rank outputs against the 1-process run). On a machine with
# two GPUs (nvidia-h200-x2), from the repository root:
#
#   OUT=/tmp/out bash lab/nccl_ranks/record.sh
#
# What comes back: nccl.txt (every command's output, in order), compare.json, nccl2.tar.gz (the recordings).
set -o pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
py=${PY:-python3}
log="$OUT/nccl.txt"
mkdir -p "$OUT"
workload=(--scenario distinct_burst --model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu --backends slab,dense)
run() { echo "\$ $*" >> "$log"; "$@" >> "$log" 2>&1; echo "(exit $?)" >> "$log"; }

if ! $py -c "import msgspec" 2>/dev/null; then
  $py -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/msgspec-*.whl || exit 3
fi
run $py -c "import mlx.core as mx; print('mlx', mx.__version__, 'nccl available:', mx.distributed.is_available('nccl'))"
run nvidia-smi --query-gpu=index,name,memory.total --format=csv
run $py -m app record --ranks 2 --launch-backend nccl "${workload[@]}" --out "$OUT/nccl2"
run $py -m app record "${workload[@]}" --out "$OUT/nccl2"
run $py -m app compare "$OUT/nccl2" --same-outputs   # exit 1 if any run generated other tokens
$py -m app compare "$OUT/nccl2" --json > "$OUT/compare.json" 2>> "$log"
tar -czf "$OUT/nccl2.tar.gz" -C "$OUT" nccl2 && rm -rf "$OUT/nccl2"
