# decode step at 8 vs 128 rows per slab on a burst of 16 x 8k (512 vs 32 slabs a layer): build / encode / step ms
# and the costliest host functions per step (lab/decode_step/engine_anatomy.py)
python3 -c "import mlx.core, mlx_lm" 2>/dev/null || bash .gpu/b/install.sh >/tmp/install.log 2>&1
export PYTHONPATH=. PYTHONUNBUFFERED=1
python3 -c "import msgspec" 2>/dev/null || python3 -m pip install -q --no-index --no-deps .gpu/b/msgspec-*.whl
for rows in ${ROWS:-8 128}; do
  echo "== engine anatomy, --slab-blocks $rows"
  timeout 250 python3 -m lab.decode_step.engine_anatomy --backends slab --model synthetic:qwen3-0.6b --dtype bfloat16 \
    --device gpu --set n=16 --set prompt_tokens=8192 --set gen_tokens=64 --slab-blocks $rows --rounds 2 \
    --profile 22 2>&1 | tail -n 30
done
