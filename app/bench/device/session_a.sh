#!/usr/bin/env bash
# Device session A (GPU machine, repo root, after .gpu/b/install.sh): kernel correctness on the GPU, the
# `bench decode` grids and thresholds, and a small GPU rehearsal of session B's workload steps.
# Files in $OUT (<= 8): device.txt pytest.log correctness.jsonl bench_decode.json thresholds.json
# bench_decode_fragmented.json session_b.json session_b.log
set -o pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv;
  python3 -c "import mlx.core as mx; print('mlx', mx.__version__, mx.default_device(), 'cuda', mx.cuda.is_available(), mx.device_info())"; } > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
t0=$(date +%s)
# Small cases first: a compile error or a wrong result stops here, cheaply.
SLABSCOPE_GPU_REPORT=$OUT/correctness.jsonl python3 -m pytest -q -p no:cacheprovider -x \
    tests/gpu/test_paged_decode_gpu.py -k "ragged or fp16 or logical_start" 2>&1 | tee "$OUT/pytest.log" | tail -15 || exit 1
echo "small cases done in $(( $(date +%s) - t0 )) s"
SLABSCOPE_GPU_REPORT=$OUT/correctness.jsonl python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_paged_decode_gpu.py -k "grid" 2>&1 | tee -a "$OUT/pytest.log" | tail -4
python3 app/bench/device/summarize_errors.py "$OUT/correctness.jsonl"
echo "grid done in $(( $(date +%s) - t0 )) s"
python3 -m app.commands.bench_decode --out "$OUT/bench_decode.json" --write-thresholds "$OUT/thresholds.json" 2>/dev/null
echo "bench done in $(( $(date +%s) - t0 )) s"
python3 -m app.commands.bench_decode --layout fragmented --batches 4,16 --contexts 1024,4096,16384 \
    --out "$OUT/bench_decode_fragmented.json" 2>/dev/null | tail -9
echo "fragmented bench done in $(( $(date +%s) - t0 )) s"
python3 app/bench/device/session_b.py --only env,warmup_dense,warmup_slab
echo "rehearsal done in $(( $(date +%s) - t0 )) s"
