#!/usr/bin/env bash
# Device session B, kernel command: tune the CUDA kernel (UNROLL x split target) over the variants that pass the
# small correctness cases, then the full `bench decode` grids, thresholds and the whole correctness test with the
# winning variant. Files in $OUT (<= 8): pytest.log correctness.jsonl tune.json bench_decode.json thresholds.json
# bench_decode_fragmented.json
set -o pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/tune
t0=$(date +%s)
passing=""
for U in 4 8; do  # both unroll variants are new code since session A (lazy V conversion)
  if SLABSCOPE_CUDA_UNROLL=$U SLABSCOPE_GPU_REPORT=$OUT/correctness.jsonl python3 -m pytest -q -p no:cacheprovider -x \
      tests/gpu/test_paged_decode_gpu.py -k "ragged or fp16 or logical_start" 2>&1 | tee -a "$OUT/pytest.log" | tail -2; then
    passing="$passing $U"
  fi
done
echo "small correctness done in $(( $(date +%s) - t0 )) s; passing unroll:$passing"
if [ -z "$passing" ]; then  # keep the workload runs off an unverified kernel
  echo "export SLABSCOPE_PAGED_ATTENTION_NATIVE=0" > /tmp/tune/winner.env
  echo "no variant passed: keep session A's kernel"; exit 1
fi
for U in $passing; do for T in 2048 8192; do
  SLABSCOPE_CUDA_UNROLL=$U SLABSCOPE_DECODE_TARGET_BLOCKS=$T python3 -m app.commands.bench_decode \
      --batches 1,4,16,32 --contexts 1024,4096,16384 --out /tmp/tune/u${U}_t${T}.json 2>/dev/null | tail -13
done; done
python3 app/bench/device/pick_variant.py /tmp/tune/*.json > "$OUT/tune.json"
python3 -c "import json; d=json.load(open('$OUT/tune.json')); print(d['winner_name'], d['scores_us'])"
python3 -c "import json; w=json.load(open('$OUT/tune.json'))['winner']; print(f'export SLABSCOPE_CUDA_UNROLL={w[\"unroll\"]} SLABSCOPE_DECODE_TARGET_BLOCKS={w[\"target_blocks\"]}')" > /tmp/tune/winner.env
. /tmp/tune/winner.env  # the workload command (session_b.py) sources it too
echo "tuning done in $(( $(date +%s) - t0 )) s; winner unroll=$SLABSCOPE_CUDA_UNROLL target=$SLABSCOPE_DECODE_TARGET_BLOCKS"
python3 -m app.commands.bench_decode --out "$OUT/bench_decode.json" --write-thresholds "$OUT/thresholds.json" 2>/dev/null
python3 -m app.commands.bench_decode --layout fragmented --batches 4,16 --contexts 1024,4096,16384 \
    --out "$OUT/bench_decode_fragmented.json" 2>/dev/null | tail -8
echo "benches done in $(( $(date +%s) - t0 )) s"
SLABSCOPE_GPU_REPORT=$OUT/correctness.jsonl python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_paged_decode_gpu.py 2>&1 | tee -a "$OUT/pytest.log" | tail -3
python3 app/bench/device/summarize_errors.py "$OUT/correctness.jsonl"
echo "all done in $(( $(date +%s) - t0 )) s"
