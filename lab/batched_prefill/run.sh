#!/usr/bin/env bash
# Batched prefill on the H200: `bench throughput` (dense, slab, mlx-lm's BatchGenerator; warm interleaved rounds
# after a warm-up + fresh processes) on issue 26's four workloads, with the scheduler's default prefill batching on a
# GPU (8192 tokens a step) or what BATCH names (BATCH=0: one sequence per prefill step, the schedule before it).
# From the repository root (python3.12 + mlx CUDA + mlx-lm):  PART=burst|heavy|geometry|ragged6k bash lab/batched_prefill/run.sh
# CPU dry run (tiny model, tiny sizes, 1 round):  SMALL=1 PART=burst bash lab/batched_prefill/run.sh
# EXTRA="--prefill-inflight 1G": more `bench throughput` flags.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
py=${PY:-python3}
OUT=${OUT:-/tmp/batched_prefill}
mkdir -p "$OUT"
batch=(); [ -n "${BATCH:-}" ] && batch=(--prefill-batch-tokens "$BATCH")
extra=(${EXTRA:-})
if [ "${SMALL:-0}" = 1 ]; then
  qwen=(--model synthetic:tiny-qwen3 --dtype float32 --device cpu); llama=(--model synthetic:tiny-llama --dtype float32 --device cpu)
  rounds=(--rounds 1 --fresh-rounds 0)
  burst=(--set n=2 --set prompt_tokens=256 --set gen_tokens=4); heavy=(--set n=2 --set prompt_tokens=128 --set gen_tokens=8)
  geometry=(--set n=2 --set prompt_tokens=128 --set gen_tokens=8)
  ragged=(--set n=3 --set concurrency=3 --set prompt_min=64 --set prompt_max=256 --set gen_min=4 --set gen_max=4)
else
  $py -c "import msgspec" 2>/dev/null || $py -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/msgspec-*.whl
  qwen=(--model synthetic:qwen3-0.6b); llama=(--model synthetic:llama-0.8b)
  rounds=(--rounds "${ROUNDS:-5}" --fresh-rounds "${FRESH:-1}")
  burst=(--set n=8 --set prompt_tokens=4096 --set gen_tokens=32); heavy=(--set n=16 --set prompt_tokens=2048 --set gen_tokens=256)
  geometry=(--set n=16 --set prompt_tokens=2048 --set gen_tokens=128)
  ragged=(--set n=16 --set concurrency=16 --set prompt_min=1024 --set prompt_max=6144 --set gen_min=128 --set gen_max=128)
fi
bench() {  # $1 label, then bench throughput arguments
  local label=$1; shift
  echo "== $label ${batch[*]:-default prefill batching}"
  $py -m app bench throughput "${rounds[@]}" "${batch[@]}" "${extra[@]}" "$@" 2> "$OUT/$label.err" | tee "$OUT/$label.txt"
  tail -n 3 "$OUT/$label.err"
}
case "${PART:-burst}" in
  burst) bench burst "${qwen[@]}" --scenario distinct_burst "${burst[@]}" ;;
  heavy) bench decode_heavy "${qwen[@]}" --scenario distinct_burst "${heavy[@]}" ;;
  geometry) bench geometry "${llama[@]}" --scenario distinct_burst "${geometry[@]}" ;;
  ragged6k) bench ragged6k "${qwen[@]}" --scenario churn "${ragged[@]}" ;;
  *) echo "PART must be burst, heavy, geometry or ragged6k" >&2; exit 2 ;;
esac
