#!/usr/bin/env bash
# Head-major slab rows on the H200: the GPU tests the layout touches, then `bench throughput` (dense, slab, mlx-lm's
# BatchGenerator; 5 warm interleaved rounds + 1 fresh process each) on the issues' workloads.
# From the repository root (python3.12 + mlx CUDA + mlx-lm):  PART=tests|burst|heavy|ragged6k bash lab/head_major/run.sh
# CPU dry run (tiny model, tiny sizes, 1 round):  SMALL=1 PART=burst bash lab/head_major/run.sh
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
py=${PY:-python3}
OUT=${OUT:-/tmp/head_major}
mkdir -p "$OUT"
if [ "${SMALL:-0}" = 1 ]; then
  model=(--model synthetic:tiny-qwen3 --dtype float32 --device cpu); rounds=(--rounds 1 --fresh-rounds 0)
  burst=(--set n=2 --set prompt_tokens=256 --set gen_tokens=4); heavy=(--set n=2 --set prompt_tokens=128 --set gen_tokens=8)
  ragged=(--set n=3 --set concurrency=3 --set prompt_min=64 --set prompt_max=256 --set gen_min=4 --set gen_max=4)
else
  $py -c "import msgspec" 2>/dev/null || $py -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/msgspec-*.whl
  model=(--model synthetic:qwen3-0.6b); rounds=(--rounds "${ROUNDS:-5}" --fresh-rounds "${FRESH:-1}")
  burst=(--set n=8 --set prompt_tokens=4096 --set gen_tokens=32); heavy=(--set n=16 --set prompt_tokens=2048 --set gen_tokens=256)
  ragged=(--set n=16 --set concurrency=16 --set prompt_min=1024 --set prompt_max=6144 --set gen_min=128 --set gen_max=128)
fi
bench() {  # $1 label, then bench throughput arguments
  local label=$1; shift
  echo "== $label"
  $py -m app bench throughput "${model[@]}" "${rounds[@]}" "$@" 2> "$OUT/$label.err" | tee "$OUT/$label.txt"
  tail -n 3 "$OUT/$label.err"
}
case "${PART:-tests}" in
  tests) timeout 300 $py -m pytest -q -rf -p no:cacheprovider tests/gpu 2>&1 | tail -n 25 ;;
  burst) bench burst --scenario distinct_burst "${burst[@]}" ;;
  heavy) bench decode_heavy --scenario distinct_burst "${heavy[@]}" ;;
  ragged6k) bench ragged6k --scenario churn "${ragged[@]}" ;;
  *) echo "PART must be tests, burst, heavy or ragged6k" >&2; exit 2 ;;
esac
