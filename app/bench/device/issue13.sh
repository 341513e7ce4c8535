#!/usr/bin/env bash
# Every GPU figure issue 13 ("GPU from the first step") asks for, on the GPU machine (repo root, MLX with CUDA
# installed), in two commands of well under 9 minutes each. Outputs under $OUT (default /tmp/out).
#
#   bash app/bench/device/issue13.sh part1   # correctness, fresh-process record tables (cold and warm kernel
#                                            # cache, trim off / 0.10), first fused step, footprint vs ideal,
#                                            # probe cost on/off at 10 and 100 Hz
#   bash app/bench/device/issue13.sh part2   # decode-heavy record; slabscope bench throughput on both workloads
#                                            # beside mlx-lm
#   bash app/bench/device/issue13.sh quick   # a 3-minute subset of part1 (a developer's validation run)
set -o pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
py=python3
model=(--model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu)
burst=(--scenario distinct_burst --set n=8 --set prompt_tokens=4096 --set gen_tokens=32 "${model[@]}")
heavy=(--scenario distinct_burst --set n=16 --set prompt_tokens=2048 --set gen_tokens=256 "${model[@]}")
t0=$(date +%s)
say() { echo "== $* ($(( $(date +%s) - t0 )) s)"; }

device_info() {
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv;
    $py -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, 'mlx-lm', mlx_lm.__version__, mx.default_device(), mx.device_info())";
    $py -c "from pool.kernels.nvrtc import load_nvrtc; n = load_nvrtc(); print('nvrtc', n.path, n.version)"; } \
    > "$OUT/device.txt" 2>&1
  cat "$OUT/device.txt"
}

# record DIR [extra record args...]: fresh processes (one per backend), then the issue-13 report of DIR
record() {
  local dir=$1; shift
  $py -m app record "$@" --out "$OUT/$dir" --sample-hz 100 --snapshot-hz 0.5 > "$OUT/$dir.txt" 2>&1
  tail -8 "$OUT/$dir.txt"
  $py app/bench/device/issue13_report.py "$OUT/$dir" --json "$OUT/$dir.json" | tee -a "$OUT/$dir.txt"
}

correctness() {  # $1: pytest -k expression ("" for all)
  SLABSCOPE_GPU_REPORT=$OUT/correctness.jsonl $py -m pytest -q -p no:cacheprovider tests/gpu ${1:+-k "$1"} \
    > "$OUT/pytest.txt" 2>&1
  tail -4 "$OUT/pytest.txt"
  $py app/bench/device/summarize_errors.py "$OUT/correctness.jsonl" | tee "$OUT/correctness.txt"
}

fresh_records() {
  export SLABSCOPE_KERNEL_CACHE=$(mktemp -d)  # cold: no kernel compiled before this command
  say "record, cold kernel cache"; record rec_cold "${burst[@]}" --backends slab,dense
  say "record, warm kernel cache"; record rec_warm "${burst[@]}" --backends slab,dense
  say "record, prefill trim off"; record rec_notrim "${burst[@]}" --backends slab,dense --prefill-trim off
  say "record, prefill trim 0.10"; record rec_trim10 "${burst[@]}" --backends slab,dense --prefill-trim 0.10
}

case "${1:-}" in
  part1)
    device_info
    say "correctness"; correctness ""
    fresh_records
    for hz in 10 100; do
      say "probe cost at $hz Hz"
      $py -m app bench probes --model synthetic:qwen3-0.6b --scenario distinct_burst --set n=8 \
        --set prompt_tokens=4096 --set gen_tokens=32 --backend slab --reps 5 --sample-hz $hz --snapshot-hz 0.5 \
        2>&1 | tee "$OUT/probes_${hz}hz.txt" | tail -4
    done
    ;;
  part2)
    say "record, decode-heavy"; record rec_heavy "${heavy[@]}" --backends slab,dense
    for w in burst heavy; do
      say "bench throughput $w"
      declare -n args=$w
      $py -m app bench throughput "${args[@]}" --engines dense,slab,mlx_lm --rounds 5 --fresh-rounds 1 --json \
        > "$OUT/throughput_$w.json" 2> "$OUT/throughput_$w.log"
      $py -c "import json, sys; from app.bench.throughput import format_report; \
print(format_report(json.load(open(sys.argv[1]))))" "$OUT/throughput_$w.json" | tee "$OUT/throughput_$w.txt"
    done
    ;;
  quick)
    device_info
    say "correctness subset"; correctness "nvrtc or compiles or warmup or ragged or fp16 or logical_start or monolithic or (grid and 4096 and 8)"
    fresh_records
    ;;
  *) echo "usage: $0 part1|part2|quick" >&2; exit 2 ;;
esac
say "done"
