#!/usr/bin/env bash
# Paged prefill on the GPU (issue 26): prefill tok/s of slab (paged route, gather route) vs dense vs mlx-lm's
# BatchGenerator on the workloads, then the one-prompt route table with metered bytes.
# From the repo root: bash lab/paged_prefill/run.sh   (about 7-8 minutes on one H200). SMALL=1: CPU dry run.
# POLICY=slab: also apply the prefill chunk rule (pool/prefill_policy.py) to the scenarios' chunks.
set -euo pipefail
PY=${PYTHON:-python3}
export PYTHONPATH=.
if [ "${SMALL:-0}" = "1" ]; then
  MODEL=synthetic:tiny-llama; ROUNDS=1; FRESH=0; DEV="--device cpu"
  BURST="n=2 prompt_tokens=256 gen_tokens=4"; HEAVY="n=2 prompt_tokens=128 gen_tokens=4"
  RAGGED="n=3 concurrency=3 prompt_min=64 prompt_max=384 gen_min=4 gen_max=4"
else
  MODEL=synthetic:qwen3-0.6b; ROUNDS=5; FRESH=1; DEV=""
  BURST="n=8 prompt_tokens=4096 gen_tokens=32"; HEAVY="n=16 prompt_tokens=2048 gen_tokens=256"
  RAGGED="n=16 concurrency=16 prompt_min=1024 prompt_max=6144 gen_min=128 gen_max=128"
fi
sets() { for kv in "$@"; do printf -- '--set %s ' "$kv"; done; }
bench() {  # $1 label, $2 rounds, then bench throughput arguments; paged route with fresh processes, then gather
  local label=$1 rounds=$2; shift 2
  for route in 1 0; do
    local fresh=$FRESH; [ "$route" = 0 ] && fresh=0  # the gather route is today's: warm rounds only (time box)
    echo "== $label, SLABSCOPE_PAGED_PREFILL=$route (1: paged route, 0: gather route)"
    SLABSCOPE_PAGED_PREFILL=$route SLABSCOPE_PREFILL_CHUNK_POLICY=${POLICY:-scenario} \
      $PY -m app bench throughput --model "$MODEL" --rounds "$rounds" --fresh-rounds "$fresh" $DEV "$@"
  done
}
# shellcheck disable=SC2046
bench "burst: distinct_burst n=8, 4096 + 32" "$ROUNDS" --scenario distinct_burst $(sets $BURST)
# shellcheck disable=SC2046
bench "decode-heavy: n=16, 2048 + 256" "$ROUNDS" --scenario distinct_burst $(sets $HEAVY)
# shellcheck disable=SC2046
bench "ragged: churn n=16 all in flight, prompts 1k-6k, 128 generated" 1 --scenario churn $(sets $RAGGED)
echo "== route table (one prompt per run, metered bytes)"
if [ "${SMALL:-0}" = "1" ]; then
  $PY -m lab.paged_prefill.routes --small --chunk 64
else
  $PY -m lab.paged_prefill.routes --model "$MODEL" --prompts 1024,4096,12288 --rounds 5 --chunk 256
fi
