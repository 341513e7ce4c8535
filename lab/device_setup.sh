# Sourced by the lab's device scripts (first_step/record_rounds.sh, open_blocks/record_ab.sh, decode_step/slab_size.sh):
# the environment (the repository root on PYTHONPATH, so `python3 -m lab...` and `-m app` run from a checkout),
# msgspec (not on the GPU image: its wheel travels in .whl/ or $WHEELS), the model flags and the two workloads every
# GPU figure uses, and our kernels built into the cubin cache first (MLX's own kernels fill MLX's cache in the first
# round). Sets py, model, burst, heavy; the caller sets OUT.
#   burst:        8 distinct 4096-token prompts, 32 generated tokens each
#   decode-heavy: 16 distinct 2048-token prompts, 256 generated tokens each
export PYTHONPATH=. PYTHONUNBUFFERED=1
py=${PY:-python3}
$py -c "import msgspec" 2>/dev/null || $py -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/msgspec-*.whl
model=(--model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu --sample-hz 100 --snapshot-hz 0.5)
burst=(--scenario distinct_burst --set n=8 --set prompt_tokens=4096 --set gen_tokens=32)
heavy=(--scenario distinct_burst --set n=16 --set prompt_tokens=2048 --set gen_tokens=256)
timeout 120 $py -m app warmup --model synthetic:qwen3-0.6b "${burst[@]}" --json > /dev/null 2>&1
timeout 120 $py -m app warmup --model synthetic:qwen3-0.6b "${heavy[@]}" --json > /dev/null 2>&1
