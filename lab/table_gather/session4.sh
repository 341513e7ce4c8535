# the table write on the H200: GPU tests of the table routes, then the churn ragged records at 8/32/128 rows per slab
python3 -c "import mlx.core, mlx_lm" 2>/dev/null || bash .gpu/b/install.sh >/tmp/install.log 2>&1
export PYTHONPATH=. PYTHONUNBUFFERED=1
python3 -c "import msgspec" 2>/dev/null || python3 -m pip install -q --no-index --no-deps .gpu/b/msgspec-*.whl
timeout 200 python3 -m pytest -q -p no:cacheprovider -x tests/gpu/test_table_write_gpu.py tests/gpu/test_table_gather_gpu.py \
  tests/gpu/test_slab_table_gpu.py tests/gpu/test_paged_decode_gpu.py 2>&1 | tail -n 6
CELLS=${CELLS:-"8:1:slab,dense 32:1:slab 128:1:slab"} TESTS=0 WHEELS=.gpu/b OUT=$OUT/tg bash lab/table_gather/run.sh 2>&1 | tail -12
