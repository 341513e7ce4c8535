#!/usr/bin/env bash
# Which kernel variant is fastest, what decision thresholds does it give, and is every variant correct? On a CUDA
# machine (nvidia-h200), from the repository root, one call of about 8 minutes:
#
#   OUT=/tmp/out bash lab/kernel_tuning/tune.sh
#
# 1. Correctness first: the small cases of tests/gpu/test_paged_decode_gpu.py, which check both unroll variants
#    (4 and 8); a failure stops here, so no timing runs on an unverified kernel.
# 2. The grid: `slabscope bench decode --unroll U --target-blocks T` (python -m app.commands.bench_decode: the GPU
#    image has no TUI dependencies) for every U in UNROLLS and T in TARGETS over batches 1,4,16,32 x contexts
#    1k,4k,16k; pick_variant.py scores each (geometric mean of fused us over the B >= 4 cells) -> $OUT/tune.json.
# 3. With the winner's flags: the full `bench decode` grid and its thresholds ($OUT/bench_decode.json,
#    $OUT/thresholds.json), the fragmented layout, and the whole correctness test (errors in correctness.jsonl).
# The product keeps its defaults (pool/kernels/tuning.py) until someone changes them there: a winner other than the
# defaults is a code change with this table beside it. `python3 -m lab.kernel_tuning.render_tables $OUT --update
# docs/gpu.md` writes the tables into the docs; copy thresholds.json over pool/kernels/thresholds.json when the
# defaults are the winner. Files in $OUT: pytest.log correctness.jsonl tune.json bench_decode.json thresholds.json
# bench_decode_fragmented.json.
set -o pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
py=${PY:-python3}
grid=$(mktemp -d)
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "== $* ($(( $(date +%s) - t0 )) s)"; }
decode() { $py -m app.commands.bench_decode "$@" 2>/dev/null; }

SLABSCOPE_GPU_REPORT=$OUT/correctness.jsonl $py -m pytest -q -p no:cacheprovider -x \
    tests/gpu/test_paged_decode_gpu.py -k "ragged or fp16 or logical_start" 2>&1 | tee -a "$OUT/pytest.log" | tail -2 \
  || { echo "small correctness cases failed: no tuning on an unverified kernel"; exit 1; }
say "small correctness cases"
for U in ${UNROLLS:-4 8}; do for T in ${TARGETS:-2048 8192}; do
  decode --unroll "$U" --target-blocks "$T" --batches 1,4,16,32 --contexts 1024,4096,16384 \
    --out "$grid/u${U}_t${T}.json" | tail -1
done; done
$py -m lab.kernel_tuning.pick_variant "$grid"/*.json > "$OUT/tune.json" || exit 1
winner=($($py -c "import json, sys; w = json.load(open(sys.argv[1]))['winner']; \
print('--unroll', w['unroll'], '--target-blocks', w['target_blocks'], '--min-chunk-tokens', w['min_chunk_tokens'])" \
  "$OUT/tune.json"))
say "grid done; winner ${winner[*]}"
decode "${winner[@]}" --out "$OUT/bench_decode.json" --write-thresholds "$OUT/thresholds.json" | tail -1
decode "${winner[@]}" --layout fragmented --batches 4,16 --contexts 1024,4096,16384 \
  --out "$OUT/bench_decode_fragmented.json" | tail -1
say "benches with the winner"
SLABSCOPE_GPU_REPORT=$OUT/correctness.jsonl $py -m pytest -q -p no:cacheprovider \
    tests/gpu/test_paged_decode_gpu.py 2>&1 | tee -a "$OUT/pytest.log" | tail -3
$py -m lab.kernel_tuning.summarize_errors "$OUT/correctness.jsonl"
say "done"
