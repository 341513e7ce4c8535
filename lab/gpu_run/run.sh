#!/usr/bin/env bash
# Every GPU figure the docs cite, at one commit, on a machine with two GPUs (nvidia-h200-x2), in one call of at most
# 9 minutes. From the repository root:
#
#   OUT=/tmp/out bash lab/gpu_run/run.sh                          # on the GPU machine
#   SMALL=1 OUT=/tmp/dry bash lab/gpu_run/run.sh                  # a CPU dry run of every step at tiny sizes
#   ONLY_A=gpu_tests,rec_burst ONLY_B=bench_host OUT=... bash ...   # a recheck: only these steps of each half
#
# A shared warm-up (MLX's own kernels and our fused kernels compiled once, into their caches), then two independent
# halves in parallel, one per GPU (halves.py: a = recordings and tests/gpu, b = benches), each stopping before
# HALF_DEADLINE_S (default 420 s), then the report. What comes back (4 files): report.md (the docs tables,
# report.py), timing.txt, final_a.tar.gz and final_b.tar.gz (every step's JSON, logs, recordings).
# msgspec is not on the GPU image: the call carries its wheel in .whl/ (or WHEELS=dir).
set -o pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
py=${PY:-python3}
small=${SMALL:+--small}
deadline=${HALF_DEADLINE_S:-420}
mkdir -p "$OUT/a" "$OUT/b"
t0=$(date +%s)
say() { echo "== $* ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/timing.txt"; }

if ! $py -c "import msgspec" 2>/dev/null; then
  $py -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/msgspec-*.whl \
    || { echo "msgspec is missing and no wheel was found in ${WHEELS:-.whl}/" >&2; exit 3; }
fi
say "warm-up"
$py -m lab.gpu_run.halves --half warm $small --out "$OUT/a" --deadline-s 90 > "$OUT/a/warm.txt" 2>&1
say "halves start"
CUDA_VISIBLE_DEVICES=0 $py -m lab.gpu_run.halves --half a $small --out "$OUT/a" --deadline-s "$deadline" --only "${ONLY_A:-}" \
  > "$OUT/a/stdout.txt" 2>&1 &
half_a=$!
CUDA_VISIBLE_DEVICES=1 $py -m lab.gpu_run.halves --half b $small --out "$OUT/b" --deadline-s "$deadline" --only "${ONLY_B:-}" \
  > "$OUT/b/stdout.txt" 2>&1 &
half_b=$!
wait $half_a; say "half a finished (exit $?)"
wait $half_b; say "half b finished (exit $?)"
cat "$OUT/a/stdout.txt" "$OUT/b/stdout.txt" >> "$OUT/timing.txt"
$py -m lab.gpu_run.report "$OUT" > "$OUT/report.md" 2> "$OUT/a/report_errors.txt" \
  || echo "report failed: see a/report_errors.txt" >> "$OUT/report.md"
tar -czf "$OUT/final_a.tar.gz" -C "$OUT" a && rm -rf "$OUT/a"
tar -czf "$OUT/final_b.tar.gz" -C "$OUT" b && rm -rf "$OUT/b"
say "done"
