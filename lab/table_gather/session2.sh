python3 -c "import mlx.core, mlx_lm" 2>/dev/null || bash .gpu/b/install.sh >/tmp/install.log 2>&1; python3 -c "import mlx.core as mx; print(mx.default_device())"
export PYTHONPATH=. PYTHONUNBUFFERED=1
python3 -c "import msgspec" 2>/dev/null || python3 -m pip install -q --no-index --no-deps .gpu/b/msgspec-*.whl
echo "== rehearsal profile, 8 rows per slab"
timeout 150 python3 -m lab.table_gather.rehearsal_profile --slab-blocks 8 --top 30 2>&1 | head -80
for m in 256 64 32; do
  echo "== bench decode B=1 --min-chunk-tokens $m"
  timeout 90 python3 -m app bench decode --batches 1 --contexts 8192,16384 --n-q-heads 16 --n-kv-heads 8 --head-dim 128 --dtype bfloat16 --layout multi --slab-blocks 8 --min-chunk-tokens $m 2>&1 | tail -n 6
done
CELLS="8:1:slab,dense 32:1:slab 128:1:slab" TESTS=0 WHEELS=.gpu/b OUT=$OUT/tg bash lab/table_gather/run.sh 2>&1 | tail -12
